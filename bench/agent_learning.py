"""Does a local model learn to call its tools? SmolLM2-135M-Instruct on `tool_calculator` for M
minutes, through the MCP tools exactly as an agent (mcp-server-rl serve over stdio, --profile smollm2).

The measure is the held-out eval's `eval_tool_call_share`: the share of greedy rollouts that
made a well-formed tool call, before the first step (the base model) and at the last eval within
the budget; beside it the eval accuracy (the final reply states the right number).

    .venv/bin/python bench/agent_learning.py [--minutes 30] [--set FIELD=JSON ...]

The last line: `tool-call share before X after Y (+Z points) in M min`.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from learning import overrides, read_run, step_figures, train_through_mcp

from rl_mcp import interrupts

# The profile's defaults (lr 3e-4, ppo, rollouts one step behind) and the environment's own
# (group 8 with 1 demonstration, batch 32, up to 3 turns of 48 tokens); the eval every 5 steps.
EDITS: dict[str, Any] = {"steps_per_eval": 5, "eval_size": 16}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--home", type=Path, default=None, help="state dir of the bench's server")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", help="override a setting")
    a = ap.parse_args()
    edits = {**EDITS, **overrides(a.set)}
    home = (a.home or Path(tempfile.mkdtemp(prefix="rl-mcp-agent-bench-"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    run_dir, _ = interrupts.run(train_through_mcp, a.minutes, home, "tool_calculator", edits)
    metrics, evals = read_run(run_dir)
    for e in evals:
        print(
            f"step {e['step']:>4}: tool-call share {e['eval_tool_call_share']:.3f}  "
            f"accuracy {e['eval_accuracy']:.3f}  turns {e['eval_agent_turns_mean']:.2f}"
        )
    figures = step_figures(metrics)
    print(f"{figures['steps']} steps, median step {figures['median_step_seconds']} s, run {run_dir}")
    first, last = evals[0], evals[-1]
    if len(evals) < 2:
        print(f"no eval after step {first['step']} within {a.minutes:g} min: lower steps_per_eval (--set)")
        return 1
    gain = 100 * (last["eval_tool_call_share"] - first["eval_tool_call_share"])
    print(
        f"tool-call share before {first['eval_tool_call_share']:.3f} after {last['eval_tool_call_share']:.3f} "
        f"({gain:+.1f} points) in {a.minutes:g} min"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
