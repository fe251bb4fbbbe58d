"""Which checkpoint a run hands out: its best by validation (keep_best, the default) or its last.

The best is chosen on validation.jsonl by tinker_atropos.best_checkpoint's rule (the trainer's own),
never on the held-out set; the held-out set's scores of both are reported beside it, so a user sees
what the choice gained on data it never looked at.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tinker_atropos.best_checkpoint import BEST, best_of, weights_name


@dataclass(frozen=True)
class CheckpointScores:
    step: int
    weights: str  # the sampler weights' name (step-000030)
    validation_accuracy: float | None
    held_out_accuracy: float | None


@dataclass(frozen=True)
class CheckpointChoice:
    best: CheckpointScores | None  # by validation, trained weights only
    last: CheckpointScores | None
    keep_best: bool

    @property
    def handed_out(self) -> Literal["best", "last"]:
        return "best" if self.keep_best and self.best is not None else "last"

    @property
    def text(self) -> str:
        parts = [
            f"{name} checkpoint step {c.step} ({_scores(c)})"
            for name, c in (("best", self.best), ("last", self.last))
            if c
        ]
        used = "the best (keep_best)" if self.handed_out == "best" else "the last"
        return "; ".join(parts) + f"; results and rl_export_model use {used}"


def checkpoint_choice(
    validation: list[dict[str, Any]], held_out: list[dict[str, Any]], keep_best: bool
) -> CheckpointChoice | None:
    """The run's best and last checkpoints with both sets' scores; None without a validation set."""
    best = best_of(validation)
    if best is None:
        return None
    finals = [r for r in held_out if r.get("final") and r.get("checkpoint") != BEST]
    best_line = next((r for r in held_out if r.get("checkpoint") == BEST), None)
    last_val = next((r for r in reversed(validation) if r.get("final")), validation[-1])
    last_step = int(last_val.get("step") or 0)
    last_held = _accuracy(finals[-1]) if finals else None
    last = CheckpointScores(last_step, weights_name(last_step), _accuracy(last_val), last_held)
    best_held = _accuracy(best_line) if best_line else (last_held if best.step == last_step else None)
    return CheckpointChoice(CheckpointScores(best.step, best.weights, best.accuracy, best_held), last, keep_best)


def _accuracy(row: dict[str, Any]) -> float | None:
    value = row.get("eval_accuracy")
    return float(value) if isinstance(value, int | float) else None


def _scores(c: CheckpointScores) -> str:
    return f"validation {_fmt(c.validation_accuracy)}, held-out {_fmt(c.held_out_accuracy)}"


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"
