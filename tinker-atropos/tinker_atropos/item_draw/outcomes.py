"""What one scored group says of its item (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Outcome = Literal["solved", "unsolved", "mixed"]
Tie = Literal["top", "zero", "other"]
FULL_CREDIT = 1.0  # Atropos' convention where an environment flags no correctness: 1.0 is full credit


@dataclass(frozen=True)
class GroupOutcome:
    outcome: Outcome
    tie: Tie | None  # the replies all scored the same (atroposlib drops the group): at the top, at zero, else
    reply_tokens: int  # the group's sampled tokens (its masks' trained positions)
    all_refused: bool = False  # every reply's tool calls or actions failed (an agent's `tool_errors`): no valid action


def group_outcome(group: Mapping[str, Any]) -> GroupOutcome | None:
    """A ScoredDataGroup's outcome: `solved` when every reply is correct (the environment's `correct`
    overrides, else full credit), `unsolved` when none is, else `mixed`; None for no scores."""
    scores = [float(s) for s in group.get("scores") or []]
    if not scores:
        return None
    flags = _correct_flags(group.get("overrides"), len(scores))
    solved = all(flags) if flags else min(scores) >= FULL_CREDIT
    unsolved = not any(flags) if flags else max(scores) <= 0.0
    outcome: Outcome = "solved" if solved else "unsolved" if unsolved else "mixed"
    tie: Tie | None = None
    if len(set(scores)) == 1:
        tie = "top" if solved else "zero" if unsolved and scores[0] <= 0.0 else "other"
    tokens = sum(_trained(mask) for mask in group.get("masks") or [])
    return GroupOutcome(outcome, tie, tokens, _all_refused(group.get("overrides"), len(scores)))


def _correct_flags(overrides: Any, n: int) -> list[bool] | None:
    if not isinstance(overrides, Sequence) or len(overrides) != n:
        return None
    flags = [o.get("correct") if isinstance(o, Mapping) else None for o in overrides]
    return [bool(f) for f in flags] if all(isinstance(f, bool) for f in flags) else None


def _trained(mask: Sequence[int]) -> int:
    return sum(1 for m in mask if m != -100)


def _all_refused(overrides: Any, n: int) -> bool:
    """Every reply called something and each call failed (`tool_errors` of an agent's overrides)."""
    if not isinstance(overrides, Sequence) or len(overrides) != n:
        return False
    return all(isinstance(o, Mapping) and int(o.get("tool_errors") or 0) > 0 for o in overrides)
