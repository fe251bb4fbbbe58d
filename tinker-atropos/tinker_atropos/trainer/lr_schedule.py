"""The learning rate of each step: warmup, then a decay to a floor over the run's own budget.

A run's budget is its `total_steps`, or its training minutes (`max_training_minutes`) when those run
out first: the decay follows whichever is further along, so a run bounded by time still ends at its
floor instead of stopping at full rate. Both backends take the value through the step's AdamParams.
"""

from __future__ import annotations

import math

from tinker_atropos.trainer.config import TinkerConfig


def budget_progress(t: TinkerConfig, step: int, training_seconds: float) -> float:
    """How far through its budget the run is when step `step` (1-based) updates: 0 at the first."""
    by_steps = (step - 1) / max(t.total_steps - 1, 1)
    by_time = training_seconds / (t.max_training_minutes * 60) if t.max_training_minutes else 0.0
    return min(max(by_steps, by_time), 1.0)


def learning_rate_at(t: TinkerConfig, step: int, progress: float) -> float:
    """The learning rate of step `step` (1-based) at `progress` through the budget (budget_progress)."""
    peak = t.learning_rate
    if step <= t.lr_warmup_steps:
        return peak * step / (t.lr_warmup_steps + 1)
    if t.lr_schedule == "constant":
        return peak
    # the decay spans the budget after the warmup
    warm = (t.lr_warmup_steps / max(t.total_steps - 1, 1)) if t.lr_warmup_steps else 0.0
    p = min(max((progress - warm) / (1.0 - warm), 0.0), 1.0) if warm < 1.0 else 1.0
    shape = 1.0 - p if t.lr_schedule == "linear" else 0.5 * (1.0 + math.cos(math.pi * p))
    return peak * (t.lr_floor + (1.0 - t.lr_floor) * shape)
