"""The product installed as users install it, each step timed on this machine, in one run:

1. the wheel (and sdist) built from this checkout (`uv build`);
2. `uv tool install` of the wheel (uv's cache warm);
3. the first `tools/list` of a fresh install: the installed server from a warm cache, and
   `uvx --from <wheel> mcp-server-rl serve` from an empty uv cache (its install inside the client's window);
4. the training runtime made by uv against the same made by pip (`RL_MCP_INSTALLER=pip`), each into
   an empty folder (their caches as this machine has them);
5. the first `rl_test_inference` after it (letter_repeat, tiny-chat: the local profile).

    .venv/bin/python bench/install.py [--skip-pip]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from uv import find_uv_bin

ROOT = Path(__file__).resolve().parents[1]
UV = find_uv_bin()
MACHINE_STATE = ("RL_MCP_HOME", "RL_MCP_CACHE", "RL_MCP_RUNTIMES", "TINKER_ATROPOS_CACHE", "HF_HOME", "XDG_CACHE_HOME")


def timed(what: str, argv: list[str], env: dict[str, str], rows: list[tuple[str, float]]) -> None:
    started = time.monotonic()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows.append((what, time.monotonic() - started))


async def first_answer(argv: list[str], env: dict[str, str], then: Callable[[Client], Awaitable[Any]] | None) -> float:
    """Seconds from launching `argv` to its tools/list answer (then `then`, untimed)."""
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
    started = time.monotonic()
    with open(os.devnull, "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            await client.list_tools()
            seconds = time.monotonic() - started
            if then is not None:
                await then(client)
    return seconds


async def test_inference_seconds(client: Client) -> float:
    for tool, args in (("rl_select_environment", {"name": "letter_repeat"}),):
        assert not (await client.call_tool(tool, args)).is_error
    started = time.monotonic()
    result = await client.call_tool("rl_test_inference", {"num_steps": 1, "group_size": 2})
    assert not result.is_error, result.content
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-pip", action="store_true", help="time only uv's training runtime")
    args = parser.parse_args()
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp_name:
        tmp = Path(tmp_name)
        env = {k: v for k, v in os.environ.items() if k not in MACHINE_STATE and not k.startswith("VIRTUAL_ENV")}
        env.update(HOME=str(tmp / "home"), RL_MCP_PROFILE="local", HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
        env["UV_CACHE_DIR"] = subprocess.run([UV, "cache", "dir"], capture_output=True, text=True).stdout.strip()
        env.update(UV_TOOL_DIR=str(tmp / "tools"), UV_TOOL_BIN_DIR=str(tmp / "bin"))
        (tmp / "home").mkdir()
        build = [UV, "build", "-q", "--out-dir", str(tmp / "dist"), str(ROOT)]
        timed("wheel and sdist built (uv build)", build, env, rows)
        (wheel,) = (tmp / "dist").glob("*.whl")
        timed("uv tool install of the wheel (warm cache)", [UV, "tool", "install", "-q", str(wheel)], env, rows)
        server = [str(tmp / "bin" / "mcp-server-rl"), "serve"]
        rows.append(("first tools/list, installed (warm)", anyio.run(first_answer, server, env, None)))
        cold = {**env, "UV_CACHE_DIR": str(tmp / "empty-uv-cache")}
        uvx = [UV, "tool", "run", "--from", str(wheel), "mcp-server-rl", "serve"]
        rows.append(("first tools/list, uvx --from wheel (empty uv cache)", anyio.run(first_answer, uvx, cold, None)))
        for installer in ("uv", *(() if args.skip_pip else ("pip",))):
            made = {**env, "RL_MCP_RUNTIMES": str(tmp / f"runtimes-{installer}"), "RL_MCP_INSTALLER": installer}
            setup = [str(tmp / "bin" / "mcp-server-rl"), "setup", "training"]
            timed(f"training runtime made with {installer}", setup, made, rows)
        after = {**env, "RL_MCP_RUNTIMES": str(tmp / "runtimes-uv")}
        seconds: list[float] = []

        async def then(client: Client) -> None:
            seconds.append(await test_inference_seconds(client))

        anyio.run(first_answer, server, after, then)
        rows.append(("first rl_test_inference after it (tiny-chat, 1 group of 2)", seconds[0]))
    print(f"{'step':<62} {'seconds':>8}")
    for what, value in rows:
        print(f"{what:<62} {value:>8.1f}")


if __name__ == "__main__":
    main()
