"""Can SmolLM2-135M-Instruct learn reasoning-gym's easy tasks on a CPU? M minutes of training each.

For each task (default: chain_sum and products, each with two one-digit terms: the easiest of
those tried here; SmolLM2 scores 0 of 8 greedily on every one of twelve small tasks before
training, writing sentences where the task wants the bare answer), through the MCP tools exactly
as an agent (bench/learning.py's `train_through_mcp`): the `smollm2` profile, rl_select_environment
reasoning_gym:<task>, rl_edit_config, rl_start_training, rl_check_status until M minutes of
training are spent (the evals not counted), rl_stop_training.
Accuracy (a score of 1) and the mean score (the task's own, partial credit included) are the run's
own held-out eval (greedy, `eval_size` problems generated with `eval_seed`, disjoint seeds from
training): before = the base model's (step 0), after = the last eval inside the budget (every
`steps_per_eval` steps).

    .venv/bin/python bench/reasoning_gym_tasks.py [--minutes 10] [--task NAME=JSON ...]

The last line per task: `<task>: eval accuracy before X after Y (+Z points) at step S in M min`.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
from pathlib import Path
from typing import Any

from learning import read_run, step_figures, train_through_mcp

from rl_mcp import interrupts

SETTINGS: dict[str, Any] = {
    "group_size": 8,
    "batch_size": 16,
    "max_completion_tokens": 24,
    "eval_size": 32,
    "steps_per_eval": 5,
    "learning_rate": 3e-4,
    "lora_rank": 16,
    "loss_fn": "ppo",
    "max_batches_offpolicy": 1,
}
TASKS: dict[str, dict[str, Any]] = {
    "chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    "products": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
}


async def one_task(task: str, settings: dict[str, Any], minutes: float, home: Path) -> dict[str, Any]:
    edits = {**SETTINGS, **settings}
    run_dir, _ = await train_through_mcp(minutes, home, f"reasoning_gym:{task}", edits, training_clock=True)
    metrics, evals = read_run(run_dir)
    inside = [e for e in evals if not e.get("final")]
    return {
        "task": task,
        "settings": settings,
        "before": inside[0]["eval_accuracy"],
        "after": inside[-1]["eval_accuracy"],
        "after_step": inside[-1]["step"],
        "reward_before": inside[0]["eval_reward_mean"],  # the task's own score, partial credit included
        "reward_after": inside[-1]["eval_reward_mean"],
        "in_run_evals": {e["step"]: e["eval_accuracy"] for e in inside},
        **step_figures(metrics),
        "run_dir": str(run_dir),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--task", action="append", default=[], metavar="NAME=JSON", help="a task and its settings")
    a = ap.parse_args()
    tasks = {name: json.loads(raw) for name, _, raw in (t.partition("=") for t in a.task)} or TASKS
    print(f"machine: {platform.processor() or platform.machine()}, {a.minutes:g} min of training per task")
    with tempfile.TemporaryDirectory(prefix="rl-bench-rg-") as tmp:
        for task, settings in tasks.items():
            home = Path(tmp) / task
            home.mkdir()
            r = interrupts.run(one_task, task, settings, a.minutes, home)  # a signal stops the run first
            print(json.dumps(r))
            gain = 100 * (r["after"] - r["before"])
            print(
                f"{task}: eval accuracy before {r['before']:.3f} after {r['after']:.3f} ({gain:+.1f} points) "
                f"at step {r['after_step']} in {a.minutes:g} min ({r['steps']} steps, "
                f"median step {r['median_step_seconds']:.1f} s); eval reward {r['reward_before']:.3f} -> "
                f"{r['reward_after']:.3f}"
            )


if __name__ == "__main__":
    main()
