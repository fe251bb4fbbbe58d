"""A user's own environments on SmolLM2: a short run of each through the MCP tools, first and last
step rewards and step times, beside the same figures for a bundled environment in the same run.

The environments are files as users bring them (examples/atropos_envs: Atropos-shaped, run
unchanged; examples/hermes_port: written against Hermes with only the imports changed). Local
backend, profile smollm2, no keys, no network.

    .venv/bin/python bench/byo_envs.py [--steps 2] [--env walk_steps] [--env NAME ...] [--set FIELD=JSON]
        [--profile smollm2]

SIGINT, SIGTERM or SIGHUP stop the run under way (rl_mcp.interrupts) before the bench exits.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from learning import overrides
from mcp import Client

from rl_mcp import interrupts
from tinker_atropos.run_files import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
ENV_DIRS = [ROOT / "examples" / "atropos_envs", ROOT / "examples" / "hermes_port"]
DEFAULT_ENVS = ["walk_steps", "terminal_hello", "arithmetic"]  # multi-turn Atropos-style, a Hermes port, bundled
SMALL = {"group_size": 4, "batch_size": 8}


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool}: {result.content[0].text}")  # type: ignore[union-attr]
    return result.structured_content or {}


async def run_one(client: Client, env_name: str, steps: int, edits: dict[str, Any]) -> dict[str, Any]:
    await call(client, "rl_select_environment", name=env_name)
    for field, value in {**SMALL, "total_steps": steps, **edits}.items():
        await call(client, "rl_edit_config", field=field, value=value)
    started = time.monotonic()
    run = await call(client, "rl_start_training")
    with anyio.fail_after(1800):
        while (status := await call(client, "rl_check_status", run_id=run["run_id"]))["status"] in (
            "starting",
            "running",
            "stopping",
        ):
            await anyio.sleep(1.0)
    wall = time.monotonic() - started
    if status["status"] != "completed":
        raise RuntimeError(f"{env_name}: run {status['status']}: {status.get('error')}")
    metrics = read_jsonl(Path(run["run_dir"]) / "metrics.jsonl")
    return {
        "environment": env_name,
        "rewards": [m.get("reward_mean") for m in metrics],
        "step_seconds": [m.get("step_seconds") for m in metrics],
        "wall_s": wall,
    }


async def main(envs: list[str], steps: int, edits: dict[str, Any], profile: str) -> list[dict[str, Any]]:
    from rl_mcp.app import open_app
    from rl_mcp.mcp_api.server import build_server
    from rl_mcp.settings import Settings

    with tempfile.TemporaryDirectory(prefix="rl-mcp-byo-bench-") as home:
        env = {
            **os.environ,
            "RL_MCP_HOME": home,
            "RL_MCP_PROFILE": profile,
            "RL_MCP_ENV_DIRS": os.pathsep.join(str(d) for d in ENV_DIRS if d.is_dir()),
            "RL_MCP_STATUS_MIN_INTERVAL": "0",
            "HF_HUB_OFFLINE": "1",
            "WANDB_MODE": "disabled",
        }
        env.pop("TINKER_API_KEY", None)
        async with open_app(Settings.from_env(env, stop_runs_on_exit=True)) as app:
            async with Client(build_server(app)) as client:
                return [await run_one(client, name, steps, edits) for name in envs]


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--env", action="append", help=f"environment name (default: {', '.join(DEFAULT_ENVS)})")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", help="an rl_edit_config edit")
    parser.add_argument("--profile", default="smollm2", help="the server's profile (local: the tiny model, quick)")
    args = parser.parse_args()
    edits = overrides(args.set)
    rows = interrupts.run(main, args.env or DEFAULT_ENVS, args.steps, edits, args.profile)
    print(f"{'environment':<24} {'first reward':>12} {'last reward':>12} {'s/step':>8} {'wall s':>8}")
    for row in rows:
        steps_s = [s for s in row["step_seconds"] if s is not None]
        per_step = sum(steps_s) / len(steps_s) if steps_s else None
        first, last = row["rewards"][0], row["rewards"][-1]
        print(f"{row['environment']:<24} {_fmt(first):>12} {_fmt(last):>12} {_fmt(per_step):>8} {row['wall_s']:>8.1f}")
