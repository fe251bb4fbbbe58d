"""rl_test_inference's progress notifications: each scored group as it comes and, while none comes,
every WAITING_REPORT_S what the models are doing (tokens generated so far, requests in flight,
replies cut at their cap, groups discarded), so a long reply is not a silent wait.

The protocol wants each progress value larger than the one before: the value counts scored
groups, and a report while waiting adds a growing fraction short of the next group.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from rl_mcp.runs.env_health import EnvHealth

WAITING_REPORT_S = 5.0

ProgressFn = Callable[[float, float, str], Awaitable[None]]


class Progress:
    """Counts scored groups over all models and reports each new one, and the waits between them."""

    def __init__(self, per_model: int, models: int, report: ProgressFn | None) -> None:
        self.per_model = per_model
        self.total = per_model * models
        self.done: dict[str, int] = {}
        self._report = report
        self._waits = 0  # waiting reports since the latest group
        self._last: dict[str, float] = {}  # per model: when it last reported

    async def update(self, model: str, groups: int) -> None:
        if groups <= self.done.get(model, 0):
            return
        self.done[model] = groups
        self._waits = 0
        self._last[model] = time.monotonic()
        await self._send(float(sum(self.done.values())), f"{model}: group {groups}/{self.per_model} scored")

    def due(self, model: str) -> bool:
        """Whether `model`, groups still to score, has been quiet long enough for a waiting report
        (so a waiting value stays below the total)."""
        since = self._last.setdefault(model, time.monotonic())
        pending = self.done.get(model, 0) < self.per_model
        return self._report is not None and pending and time.monotonic() - since >= WAITING_REPORT_S

    async def waiting(self, model: str, what: str) -> None:
        self._waits += 1
        self._last[model] = time.monotonic()
        value = sum(self.done.values()) + self._waits / (self._waits + 1)
        await self._send(value, f"{model}: {self.done.get(model, 0)}/{self.per_model} groups scored; {what}")

    async def _send(self, value: float, message: str) -> None:
        if self._report is not None:
            await self._report(value, float(self.total), message)


def waiting_line(health: EnvHealth | None, live_tokens: int | None, waited_s: float, now: float) -> str:
    """What a model is doing while no group comes: tokens generated so far (as the local server
    decodes them, else those of the replies received), requests in flight, cut replies, discards."""
    parts = [f"waiting {waited_s:.0f} s"]
    req = health.requests if health else None
    if req is None or not req.sent:
        return "; ".join([*parts, "no request sent yet (the environment is starting)"])
    tokens = live_tokens if live_tokens is not None else (req.reply_tokens if req else 0)
    parts.append(f"{tokens:,} tokens generated so far")
    if req and req.in_flight:
        oldest = f" (the oldest for {now - req.oldest_in_flight_at:.0f} s)" if req.oldest_in_flight_at else ""
        parts.append(f"{req.in_flight} request{'s' if req.in_flight > 1 else ''} in flight{oldest}")
    if req and req.timeouts:
        parts.append(f"{req.timeouts} request tries timed out")
    if req and req.replies_at_cap:
        parts.append(f"{req.replies_at_cap} of {req.replies} replies ran to their token cap")
    if health and health.discards:
        parts.append(f"{health.discards.groups_discarded} groups discarded")
    return "; ".join(parts)
