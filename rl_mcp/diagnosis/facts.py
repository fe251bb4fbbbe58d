"""A run's facts as the diagnosis rules read them, and the windows of steps they compare."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.findings import Evidence
from rl_mcp.runs.env_health import Discards, Requests
from rl_mcp.runs.item_counts import ItemCounts
from rl_mcp.runs.metrics import Points
from tinker_atropos.best_checkpoint import BEST


@dataclass(frozen=True)
class RunFacts:
    """What the rules read of one run."""

    run_id: str
    metrics: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    env: dict[str, Any] = field(default_factory=dict)  # the run config's env section
    trainer: dict[str, Any] = field(default_factory=dict)  # ... and its trainer section
    active: bool = False
    now: float = 0.0
    running_since: float | None = None  # when the run reached `running`
    env_drops_equal_groups: bool = False  # its env.log's latest lines: atroposlib drops all-equal groups
    replies_step: int | None = None  # the step of `replies`
    replies: list[tuple[float, str]] = field(default_factory=list)  # its best-scored replies (score, text)
    discards: Discards | None = None  # the groups its environment discarded (env_health.json)
    requests: Requests | None = None  # its environment's model requests (env_health.json)
    sft_steps: list[dict[str, Any]] = field(default_factory=list)  # its supervised stage's steps
    groups_scored: int | None = None  # the groups its environment scored in all (env_health.json)
    items: ItemCounts | None = None  # its training items and the groups that tied (items.json)
    validation: list[dict[str, Any]] = field(default_factory=list)  # validation.jsonl
    teacher: dict[str, Any] | None = None  # teacher.json: the run's teacher as resolved at its start

    @property
    def curve(self) -> list[dict[str, Any]]:
        """The periodic evaluations: the validation set's where the run has one, else the held-out set's
        (its line for the best checkpoint aside)."""
        return self.validation or [e for e in self.evals if e.get("checkpoint") != BEST]


def window(points: Points) -> int:
    """How many steps an early or a recent window holds."""
    return max(t.MIN_WINDOW_STEPS, min(t.MAX_WINDOW_STEPS, round(len(points) * t.WINDOW_SHARE)))


def ends(points: Points) -> tuple[Points, Points]:
    """The run's first window of steps and its latest one (they overlap below MIN_TREND_STEPS)."""
    w = min(window(points), len(points))
    return points[:w], points[-w:]


def episode(points: Points, above: float) -> Points:
    """Where a metric ran highest: the MIN_WINDOW_STEPS steps with the highest mean, widened to the
    neighbouring steps still above `above`; [] when that window's mean is not above it."""
    size = t.MIN_WINDOW_STEPS
    if len(points) < size:
        return []
    start = max(range(len(points) - size + 1), key=lambda i: mean_of(points[i : i + size]))
    if not mean_of(points[start : start + size]) > above:
        return []
    end = start + size
    while start > 0 and points[start - 1][1] > above:
        start -= 1
    while end < len(points) and points[end][1] > above:
        end += 1
    return points[start:end]


def mean_of(points: Points) -> float:
    return sum(v for _, v in points) / len(points)


def window_means(metric: str, first: Points, recent: Points) -> list[Evidence]:
    """A metric's first and latest windows, each with its mean: the evidence of a trend rule."""
    return [evidence_of(metric, w, f"mean {mean_of(w):.3g} over {span_of(w)}") for w in (first, recent)]


def evidence_of(metric: str, points: Points, summary: str) -> Evidence:
    return Evidence(metric, [s for s, _ in points], [v if math.isfinite(v) else None for _, v in points], summary)


def span_of(points: Points) -> str:
    return f"steps {points[0][0]}-{points[-1][0]}" if len(points) > 1 else f"step {points[0][0]}"


def sample_replies(facts: RunFacts) -> list[Evidence]:
    """What the reward pays for: the newest step's best-scored replies, quoted (none when the run
    kept none)."""
    if facts.replies_step is None or not facts.replies:
        return []
    quoted = "; ".join(f"{text[: t.QUOTED_REPLY_CHARS]!r} (score {score:.3g})" for score, text in facts.replies)
    return [
        Evidence(
            "sample_replies",
            [facts.replies_step] * len(facts.replies),
            [score for score, _ in facts.replies],
            f"the best-scored replies of step {facts.replies_step}: {quoted}",
        )
    ]
