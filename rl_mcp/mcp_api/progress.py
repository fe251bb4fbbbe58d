"""One tool call's progress notifications on one rising scale.

The MCP spec wants each notification's `progress` larger than the one before, even when the total is
unknown. A long tool reports from several places that each count from zero (an environment folder's
pip lines, a managed engine restarting, the domain's counted phases: scored groups, export fractions,
a start's stages), so each call makes one `CallProgress` and hands its callbacks down: the domain
keeps its plain callback shapes and never imports the SDK.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable

import anyio

NUDGE = 1e-3  # of a phase's size: how far a report that would not rise is moved forward

Send = Callable[[float, float | None, str | None], Awaitable[None]]
"""The SDK's `Context.report_progress(progress, total, message)`."""


class CallProgress:
    """The progress of one tool call: every value sent is larger than the one before, and never above
    the total sent with it; every notification keeps its message."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self._last: float | None = None  # the value sent last; None before the first
        self._lock = anyio.Lock()  # models report from parallel tasks: values leave in the order made

    async def note(self, message: str) -> None:
        """A free-form stage (a pip line, an engine restart, a wait): the next whole step, total unknown."""
        async with self._lock:
            await self._emit(1.0 if self._last is None else math.floor(self._last) + 1.0, None, message)

    def phase(self) -> Callable[[float, float, str], Awaitable[None]]:
        """A callback for one counted phase, `(done, total, message)` counted from 0, laid after what
        was sent before its first report; a report that would not rise is nudged forward within the
        phase, and dropped when nothing is left below its total."""
        base: float | None = None

        async def report(done: float, total: float, message: str) -> None:
            nonlocal base
            async with self._lock:
                if base is None:
                    base = self._last or 0.0
                end = base + total
                value = min(base + done, end)
                if self._last is not None and value <= self._last:
                    value = min(self._last + NUDGE * total, (self._last + end) / 2)
                    if value <= self._last:
                        return
                await self._emit(value, end, message)

        return report

    async def _emit(self, value: float, total: float | None, message: str) -> None:
        self._last = value
        await self._send(value, total, message)
