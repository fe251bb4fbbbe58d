"""A run's training minutes: from its first batch, the evaluations since not counted (rollouts stop
while the environment evaluates), as bench/learning.py and TRL's trainer count a budget."""

from __future__ import annotations

import time
from pathlib import Path

from tinker_atropos.run_files import JsonlReader, RunFiles


class TrainingClock:
    """Counts from `start()` (the first batch); `seconds()` less the evaluations begun since."""

    def __init__(self, run_dir: Path, minutes: float | None) -> None:
        files = RunFiles(run_dir)
        self._evals = [JsonlReader(files.evals), JsonlReader(files.validation)]
        self._budget_s = minutes * 60 if minutes else None
        self._started: float | None = None  # time.time() of the first batch

    def start(self) -> None:
        if self._started is None:
            self._started = time.time()

    def seconds(self) -> float:
        if self._started is None:
            return 0.0
        started = self._started
        evaluating = sum(
            float(row.get("seconds") or 0.0)
            for reader in self._evals
            for row in reader.refresh()
            if float(row.get("time") or 0.0) - float(row.get("seconds") or 0.0) >= started
        )
        return max(time.time() - started - evaluating, 0.0)

    def spent(self) -> bool:
        """The run's max_training_minutes are used up (never, without a budget)."""
        return self._budget_s is not None and self.seconds() >= self._budget_s
