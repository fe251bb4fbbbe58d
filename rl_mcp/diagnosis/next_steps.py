"""The config edits that several rules propose as their next step, built in one place so that
every rule phrases the same fix the same way."""

from __future__ import annotations

from typing import Any

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts
from rl_mcp.diagnosis.findings import NextStep


def edit(field_name: str, value: Any, why: str) -> NextStep:
    return NextStep("rl_edit_config", {"field": field_name, "value": value}, why)


def lower_learning_rate(facts: RunFacts, why: str) -> NextStep:
    """A tenth of the run's learning rate; where the run config could not be read, read it first."""
    return _learning_rate_times(facts, t.LEARNING_RATE_CUT, "a tenth of", why)


def raise_learning_rate(facts: RunFacts, why: str) -> NextStep:
    """Twice the run's learning rate; where the run config could not be read, read it first."""
    return _learning_rate_times(facts, 2.0, "twice", why)


def _learning_rate_times(facts: RunFacts, factor: float, words: str, why: str) -> NextStep:
    lr = facts.trainer.get("learning_rate")
    if not isinstance(lr, (int, float)):
        return NextStep("rl_get_current_config", {}, f"{why}: set learning_rate to {words} its value")
    value = float(f"{lr * factor:.3g}")
    return edit("learning_rate", value, f"{why} (from {lr}); then start a new run or fork this one")
