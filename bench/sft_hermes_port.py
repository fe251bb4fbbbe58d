"""The case the supervised stage was built for: the ported Hermes terminal environment
(examples/hermes_port/terminal_hello_env.py, terminal toolset) on SmolLM2-135M-Instruct, which
writes no tool call by itself (0 calls in ~120 rollouts: no RL step in 25 minutes). A supervised
stage from the user's own Hermes trajectory file (examples/hermes_port/trajectories.jsonl, ShareGPT)
first, then RL with groups of 4 and batches of 8, through the MCP tools as an agent.

    .venv/bin/python bench/sft_hermes_port.py [--steps 2] [--timeout-minutes 60]

The last line: the stage's steps and loss, the held-out tool-call share before and after it, and
the RL steps done with their reward and tool calls per rollout.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from learning import ROOT, checkout_server, log
from mcp import Client

from rl_mcp import interrupts
from rl_mcp.demo import call, server_environment
from tinker_atropos.run_files import read_jsonl

PORT = ROOT / "examples" / "hermes_port"
EDITS: dict[str, Any] = {
    "enabled_toolsets": ["terminal"],
    "group_size": 4,
    "batch_size": 8,
    "max_token_length": 3072,
    "max_turn_tokens": 160,
    "max_agent_turns": 4,
    "steps_per_eval": 1000,
    "terminal_backend": "auto",
    "sft": {
        "sources": ["file"],
        "file": str(PORT / "trajectories.jsonl"),
        "epochs": 8,
        "batch_size": 5,
        "learning_rate": 5e-4,
    },
}


async def run(steps: int, timeout_s: float, home: Path) -> dict[str, Any]:
    env = {**server_environment(home, "smollm2"), "RL_MCP_ENV_DIRS": str(PORT)}
    params = checkout_server(home, "smollm2", env)
    async with Client(params, read_timeout_seconds=900) as client:
        await call(client, "rl_select_environment", {"name": "terminal_hello"})
        for field, value in {**EDITS, "total_steps": steps}.items():
            await call(client, "rl_edit_config", {"field": field, "value": value})
        preview, _ = await call(client, "rl_preview_sft", {"timeout_s": 600})
        log(f"preview: {preview['counts']}, {preview['steps']} steps, ~{preview['estimated_seconds']} s")
        started, _ = await call(client, "rl_start_training")
        t0 = time.monotonic()
        while True:
            status, _ = await call(client, "rl_check_status", {"run_id": started["run_id"]})
            sft = status.get("sft") or {}
            log(
                f"{status['status']} stage={status.get('stage')} sft {sft.get('step')}/{sft.get('total_steps')} "
                f"loss {sft.get('loss')} step {status.get('step')}/{steps}"
            )
            if status["status"] in ("completed", "failed", "stopped", "lost"):
                return {**status, "run_dir": started["run_dir"], "seconds": round(time.monotonic() - t0)}
            if time.monotonic() - t0 > timeout_s:
                await call(client, "rl_stop_training", {"run_id": started["run_id"]})
                raise RuntimeError(f"not done in {timeout_s:.0f} s: {status.get('status')} step {status.get('step')}")
            await anyio.sleep(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--timeout-minutes", type=float, default=60.0)
    a = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="rl-mcp-hermes-sft-")).resolve()
    os.environ.pop("RL_MCP_ENV_DIRS", None)
    done = interrupts.run(run, a.steps, a.timeout_minutes * 60, home)
    metrics = read_jsonl(Path(done["run_dir"]) / "metrics.jsonl")
    sft, evals = done.get("sft") or {}, (done.get("sft") or {}).get("evals") or []
    shares = " -> ".join(str(e.get("eval_tool_call_share")) for e in evals)
    rl = ", ".join(
        f"step {m['step']}: reward {m.get('reward_mean')} tool calls/rollout {m.get('agent_tool_calls_mean')}"
        for m in metrics
    )
    print(
        f"{done['status']} in {done['seconds']} s: stage {sft.get('step')}/{sft.get('total_steps')} steps, loss "
        f"{sft.get('first_loss')} -> {sft.get('loss')}, held-out tool-call share {shares}; RL {rl or 'no step'}"
    )
    return 0 if done["status"] == "completed" and len(metrics) >= a.steps else 1


if __name__ == "__main__":
    raise SystemExit(main())
