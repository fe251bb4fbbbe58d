"""A run's metrics as read from its files (docs/run-files.md): the source of truth for status
and results, always written, needing no network.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rl_mcp.runs.store import RunRecord
from tinker_atropos.best_checkpoint import BEST
from tinker_atropos.run_files import JsonlReader

LATEST_KEYS = ("loss", "reward_mean", "reward_std", "percent_correct", "logprob_drift", "tokens")
# Written by the trainer only for agent (multi-turn tool-calling) environments.
AGENT_KEYS = ("agent_turns_mean", "agent_tool_calls_mean", "agent_tool_errors")
SIGNAL_KEYS = ("no_signal_share", "distinct_reply_share", "sampler_mismatch")
# Written by the trainer only for a run with a teacher (trainer.teacher).
TEACHER_KEYS = ("teacher_kl", "teacher_logprob")
T = TypeVar("T")


def downsample(rows: list[T], max_points: int) -> list[T]:
    """At most `max_points` rows, evenly spaced, always keeping the first and the last."""
    if len(rows) <= max_points:
        return list(rows)
    if max_points <= 1:
        return rows[-1:]
    last = len(rows) - 1
    idx = sorted({round(i * last / (max_points - 1)) for i in range(max_points)})
    return [rows[i] for i in idx]


def latest_metrics(
    metrics: list[dict[str, Any]], evals: list[dict[str, Any]], validation: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The newest step's headline numbers plus the newest held-out and validation accuracies."""
    out: dict[str, Any] = {k: None for k in (*LATEST_KEYS, *AGENT_KEYS, *SIGNAL_KEYS, *TEACHER_KEYS)}
    if metrics:
        out.update({k: metrics[-1].get(k) for k in out})
    held = [e for e in evals if e.get("checkpoint") != BEST]  # the best checkpoint's line is not the newest weights
    out["eval_accuracy"] = held[-1].get("eval_accuracy") if held else None
    out["eval_step"] = held[-1].get("step") if held else None
    validation = validation or []
    out["validation_accuracy"] = validation[-1].get("eval_accuracy") if validation else None
    out["validation_step"] = validation[-1].get("step") if validation else None
    return out


Points = list[tuple[int, float]]  # (step, value)


def series(rows: list[dict[str, Any]], key: str) -> Points:
    """(step, value) for each row whose `key` is a number (NaN and infinities included)."""
    return [
        (int(r.get("step", i + 1)), float(v))
        for i, r in enumerate(rows)
        if isinstance(v := r.get(key), (int, float)) and not isinstance(v, bool)
    ]


def _numbers(rows: list[dict[str, Any]], key: str) -> list[float]:
    return [float(v) for m in rows if isinstance(v := m.get(key), (int, float))]


@dataclass(frozen=True)
class EvalSummary:
    """The held-out eval across a run: the first (before training when it ran at step 0), the
    last, and the best."""

    before: float
    before_step: int
    after: float
    after_step: int
    best: float
    best_step: int

    @property
    def text(self) -> str:
        return (
            f"eval accuracy {self.before:.3f} (step {self.before_step}) -> {self.after:.3f} (step "
            f"{self.after_step}), best {self.best:.3f} at step {self.best_step}"
        )


def eval_summary(evals: list[dict[str, Any]]) -> EvalSummary | None:
    """The held-out set's evaluations of the run's weights in order (the best checkpoint's line aside)."""
    rows = [
        (int(e.get("step") or 0), float(a))
        for e in evals
        if isinstance(a := e.get("eval_accuracy"), (int, float)) and e.get("checkpoint") != BEST
    ]
    if not rows:
        return None
    first, last = rows[0], rows[-1]
    best = max(rows, key=lambda r: (r[1], -r[0]))  # the earliest step of the best accuracy
    return EvalSummary(first[1], first[0], last[1], last[0], best[1], best[0])


def eta_seconds(metrics: list[dict[str, Any]], total_steps: int, budget_minutes: float | None = None) -> float | None:
    """Remaining steps times the mean wall time per step seen so far; no later than the rest of a
    budget of training minutes (counted from the first step's start, evaluations included: an upper bound)."""
    eta = _steps_eta(metrics, total_steps)
    if budget_minutes is None or not metrics or eta is None:
        return eta
    first = metrics[0]
    started = float(first.get("time") or 0.0) - float(first.get("step_seconds") or 0.0)
    left = max(budget_minutes * 60 - (float(metrics[-1].get("time") or started) - started), 0.0)
    return round(min(eta, left), 1)


def _steps_eta(metrics: list[dict[str, Any]], total_steps: int) -> float | None:
    if not metrics:
        return None
    done = int(metrics[-1].get("step", len(metrics)))
    remaining = max(total_steps - done, 0)
    if remaining == 0:
        return 0.0
    times = _numbers(metrics, "time")
    if len(times) >= 2:
        per_step = (times[-1] - times[0]) / (len(times) - 1)
    else:
        secs = _numbers(metrics, "step_seconds")
        if not secs:
            return None
        per_step = sum(secs) / len(secs)
    return round(per_step * remaining, 1)


_WANDB_URL = re.compile(rb"W&B online: (https?://\S+)")


def wandb_url_from_log(trainer_log: Path, *, head_bytes: int = 65536) -> str | None:
    """The run URL the trainer logs when W&B starts online (result.json has it only at the end)."""
    try:
        with open(trainer_log, "rb") as fh:
            match = _WANDB_URL.search(fh.read(head_bytes))
    except FileNotFoundError:
        return None
    return match.group(1).decode() if match else None


class MetricsCache:
    """One incremental reader per run file, so a long run's metrics are parsed once."""

    def __init__(self) -> None:
        self._readers: dict[Path, JsonlReader] = {}
        self._lock = threading.Lock()  # sync tool and resource handlers run in worker threads

    def rows(self, path: Path) -> list[dict[str, Any]]:
        with self._lock:
            reader = self._readers.setdefault(path, JsonlReader(path))
            return reader.refresh()

    def metrics(self, rec: RunRecord) -> list[dict[str, Any]]:
        return self.rows(rec.files.metrics)

    def evals(self, rec: RunRecord) -> list[dict[str, Any]]:
        return self.rows(rec.files.evals)

    def validation(self, rec: RunRecord) -> list[dict[str, Any]]:
        return self.rows(rec.files.validation)

    def forget(self, rec: RunRecord) -> None:
        """Drop a settled run's readers (read again, once, if asked for later)."""
        with self._lock:
            for path in (rec.files.metrics, rec.files.evals, rec.files.validation):
                self._readers.pop(path, None)
