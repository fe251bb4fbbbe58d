"""How long one decode step takes here, as a row in the batch lives it.

A reply of R tokens takes R steps of the shared batch, and each of its rows waits for what the
batching thread does between two steps (logprobs scored, the trainer's share of the CPU). So the
wall time from one step to the next, while rows are decoding, is what a request costs per token on
this machine now; a new request's prefill is left out (paid once, not per token: a 3000-token
prompt's seconds would otherwise count as one step's). An environment derives its request timeout from it
(`tinker_atropos/request_timeouts.py`, through the inference server's /health).
"""

from __future__ import annotations

import time
from collections import deque

WINDOW = 256  # the latest steps averaged
ROWS_WINDOW = 64  # ... and the latest at each count of rows
ROWS_MIN_STEPS = 8  # a count of rows is reported once this many steps were timed with it


class DecodeClock:
    """The mean wall time between consecutive decode steps, and the mean rows they decoded; the mean
    at each count of rows seen (a step costs more with more rows, and how much more is measured)."""

    def __init__(self) -> None:
        self._gaps: deque[float] = deque(maxlen=WINDOW)
        self._rows: deque[int] = deque(maxlen=WINDOW)
        self._by_rows: dict[int, deque[float]] = {}
        self._last: float | None = None
        self._excluded = 0.0

    def exclude(self, seconds: float) -> None:
        """Time the batching thread spent on a one-off (a new request's prefill): a request pays it
        once, not per token, so the next gap leaves it out."""
        self._excluded += seconds

    def stepped(self, rows: int) -> None:
        """A step decoded `rows` rows; the first step after an idle spell starts a new gap."""
        now = time.monotonic()
        if self._last is not None:
            gap = max(0.0, now - self._last - self._excluded)
            self._gaps.append(gap)
            self._rows.append(rows)
            self._by_rows.setdefault(rows, deque(maxlen=ROWS_WINDOW)).append(gap)
        self._last, self._excluded = now, 0.0

    def idle(self) -> None:
        """No row is decoding: the time until the next one starts is not a step's."""
        self._last, self._excluded = None, 0.0

    @property
    def step_s(self) -> float | None:
        return sum(self._gaps) / len(self._gaps) if self._gaps else None

    @property
    def rows(self) -> float | None:
        return sum(self._rows) / len(self._rows) if self._rows else None

    @property
    def by_rows(self) -> dict[int, float]:
        return {
            rows: sum(gaps) / len(gaps) for rows, gaps in sorted(self._by_rows.items()) if len(gaps) >= ROWS_MIN_STEPS
        }
