"""The rule on the run's evaluation curve falling from its best.

The curve is the validation set's where the environment has one (the held-out set is then scored
only before the first step and at the end), else the held-out set's. One dip below the best points
at the best checkpoint; a fall that holds over several evaluations is the learning rate's doing (a
constant rate took the run past its peak on arithmetic, 14-17 points by the end: #76), so the next
run wants a rate that decays, or a lower one.
"""

from __future__ import annotations

from typing import Any

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts, evidence_of
from rl_mcp.diagnosis.findings import Finding, NextStep
from rl_mcp.diagnosis.next_steps import edit, lower_learning_rate
from rl_mcp.runs.metrics import Points, series


def eval_metric(evals: list[dict[str, Any]]) -> tuple[str, Points]:
    """eval_accuracy where it moves, else eval_reward_mean (a small model's accuracy stays at 0)."""
    accuracy = series(evals, "eval_accuracy")
    if len({v for _, v in accuracy}) > 1 or not series(evals, "eval_reward_mean"):
        return "eval_accuracy", accuracy
    return "eval_reward_mean", series(evals, "eval_reward_mean")


def eval_regressed(facts: RunFacts) -> Finding | None:
    """The newest evaluation fell below the run's best: keep the best checkpoint; held over several
    evaluations, change the rate too."""
    name, evals = eval_metric(facts.curve)
    if len(evals) < 2:
        return None
    best = max(evals, key=lambda p: (p[1], -p[0]))
    last = evals[-1]
    if last[0] <= best[0] or best[1] - last[1] < t.EVAL_REGRESSION_DROP:
        return None
    after = list({step: (step, v) for step, v in evals if step > best[0]}.values())  # one per step: a final
    # evaluation at a periodic one's step is the same weights
    held = len(after) >= t.FALL_EVALUATIONS and all(best[1] - v >= t.EVAL_REGRESSION_DROP for _, v in after[-2:])
    split = "validation" if facts.validation else "held-out"
    summary = f"{name} best {best[1]:.3f} at step {best[0]}, now {last[1]:.3f} at step {last[0]}"
    title = f"The {split} eval fell {100 * (best[1] - last[1]):.0f} points from its best (step {best[0]})"
    if held:
        title += f" and stayed down over {len(after)} evaluations"
    return Finding(
        "eval_regressed", "warning", title, _next_step(facts, best[0], held), [evidence_of(name, evals, summary)]
    )


def _next_step(facts: RunFacts, best_step: int, held: bool) -> NextStep:
    if best_step == 0:
        return lower_learning_rate(facts, "training made the base model worse: take smaller steps")
    if held and facts.active:
        return NextStep(
            "rl_stop_training",
            {"run_id": facts.run_id},
            f"the curve has stayed below step {best_step}'s for several evaluations: stop here; rl_export_model then "
            "takes the best checkpoint by validation (keep_best), and a fork with a decaying or lower learning rate "
            "goes on from a saved state",
        )
    if held and facts.trainer.get("lr_schedule", "constant") == "constant":
        why = "a rate that decays over the run's budget keeps the late steps from undoing the peak"
        return edit("lr_schedule", "cosine", why)
    if held:
        return lower_learning_rate(facts, "the curve fell from its peak and stayed down")
    return NextStep(
        "rl_export_model",
        {"run_id": facts.run_id, "checkpoint": best_step},
        f"keep step {best_step}'s weights, the best evaluation, not the final ones; "
        f"rl_start_training(resume_from='{facts.run_id}', checkpoint_step=...) continues from a saved state",
    )
