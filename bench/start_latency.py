"""Seconds from rl_start_training to status `running` and to the first completed step.

Local profile, real processes, through an in-memory MCP client. Printed beside the seed design's
fixed schedule (sleep 5 s after run-api, 30 s after the trainer, 90 s after the environment,
10 s more: 135 s before it reported running). Targets: running within 5 s, first step within 10 s.
run-api, the trainer and the environment are spawned at once; readiness is awaited in that order.

    .venv/bin/python bench/start_latency.py [--steps N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client

from rl_mcp import interrupts

SEED_SCHEDULE = {"api": 5.0, "trainer": 30.0, "env": 90.0, "settle": 10.0}
SEED_RUNNING_S = sum(SEED_SCHEDULE.values())
TARGET_RUNNING_S, TARGET_FIRST_STEP_S = 5.0, 10.0


async def measure(steps: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="rl-mcp-start-latency-") as home:
        return await _measure_in(Path(home), steps)


async def _measure_in(home: Path, steps: int) -> dict[str, float]:
    from rl_mcp.app import open_app
    from rl_mcp.mcp_api.server import build_server
    from rl_mcp.settings import Settings

    env = {
        **os.environ,
        "RL_MCP_HOME": str(home),
        "RL_MCP_PROFILE": "local",
        "RL_MCP_STATUS_MIN_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("TINKER_API_KEY", None)
    async with open_app(Settings.from_env(env, stop_runs_on_exit=True)) as app:
        async with Client(build_server(app)) as client:
            await client.call_tool("rl_select_environment", {"name": "letter_repeat"})
            for field, value in {"total_steps": steps, "group_size": 4, "batch_size": 8}.items():
                await client.call_tool("rl_edit_config", {"field": field, "value": value})
            t0 = time.monotonic()
            started = (await client.call_tool("rl_start_training", {})).structured_content or {}
            returned = time.monotonic() - t0
            run_id = started["run_id"]
            running = first_step = trainer_ready = None
            with anyio.fail_after(600):
                while first_step is None:
                    status = (await client.call_tool("rl_check_status", {"run_id": run_id})).structured_content or {}
                    now = time.monotonic() - t0
                    if status["status"] not in ("starting", "running"):
                        raise SystemExit(f"run ended as {status['status']}: {status.get('error')}")
                    if trainer_ready is None and (status["stage"] == "env" or status["status"] == "running"):
                        trainer_ready = now
                    if running is None and status["status"] == "running":
                        running = now
                    if status["step"] >= 1:
                        first_step = now
                    await anyio.sleep(0.1)
            rec = app.runs.get(run_id)  # type: ignore[union-attr]
            spawned = {name: proc.started_at - rec.created_at for name, proc in rec.processes.items()}
            await client.call_tool("rl_stop_training", {"run_id": run_id})
    assert running is not None and trainer_ready is not None
    return {
        "returned": returned,
        "trainer_ready": trainer_ready,
        "running": running,
        "first_step": first_step,
        **{f"spawn_{k}": v for k, v in spawned.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--runs", type=int, default=1, help="median of this many starts")
    args = parser.parse_args()
    runs = [interrupts.run(measure, args.steps) for _ in range(args.runs)]  # a signal stops the run first
    figures = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    if args.runs > 1:
        print(
            "each run (running / first step, s): "
            + ", ".join(f"{r['running']:.2f}/{r['first_step']:.2f}" for r in runs)
        )
    api, trainer, env = figures["spawn_api"], figures["spawn_trainer"], figures["spawn_env"]
    print(f"{'phase (median of ' + str(args.runs) + ')':<34}{'rl-mcp (s)':>12}{'seed design (s)':>18}")
    print(f"{'rl_start_training returned':<34}{figures['returned']:>12.2f}{'-':>18}")
    print(f"{'trainer spawned':<34}{trainer:>12.2f}{SEED_SCHEDULE['api']:>18.0f}")
    print(f"{'environment spawned':<34}{env:>12.2f}{SEED_SCHEDULE['api'] + SEED_SCHEDULE['trainer']:>18.0f}")
    print(f"{'trainer ready':<34}{figures['trainer_ready']:>12.2f}{'-':>18}")
    print(f"{'status running':<34}{figures['running']:>12.2f}{SEED_RUNNING_S:>18.0f}")
    print(f"{'first completed step':<34}{figures['first_step']:>12.2f}{'>' + format(SEED_RUNNING_S, '.0f'):>18}")
    print(
        f"running: {SEED_RUNNING_S / figures['running']:.1f}x sooner than the seed's fixed schedule "
        f"(target <= {TARGET_RUNNING_S:.0f} s: {'met' if figures['running'] <= TARGET_RUNNING_S else 'NOT met'}); "
        f"first step target <= {TARGET_FIRST_STEP_S:.0f} s: "
        f"{'met' if figures['first_step'] <= TARGET_FIRST_STEP_S else 'NOT met'} (api spawned at {api:.2f} s)"
    )


if __name__ == "__main__":
    main()
