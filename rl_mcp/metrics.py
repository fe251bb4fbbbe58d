"""Read a run's metrics from its files (docs/run-files.md); W&B only as an optional extra.

metrics.jsonl is the source of truth for status and results: it is always written and needs no
network. W&B is looked up only when WANDB_API_KEY is set, bounded in time, and never required.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

log = logging.getLogger(__name__)

LATEST_KEYS = ("loss", "reward_mean", "reward_std", "percent_correct", "logprob_drift", "tokens")


@dataclass
class JsonlReader:
    """Incremental reader: each refresh parses only the bytes appended since the last one.

    A half-written last line is left for the next refresh; a truncated or replaced file is
    read again from the start.
    """

    path: Path
    rows: list[dict[str, Any]] = field(default_factory=list)
    _offset: int = 0
    _inode: int | None = None

    def refresh(self) -> list[dict[str, Any]]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self.rows, self._offset, self._inode = [], 0, None
            return self.rows
        if st.st_ino != self._inode or st.st_size < self._offset:
            self.rows, self._offset, self._inode = [], 0, st.st_ino
        if st.st_size == self._offset:
            return self.rows
        with open(self.path, "rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                log.warning("%s: skipping a line that is not JSON", self.path)
                continue
            if isinstance(row, dict):
                self.rows.append(row)
        self._offset += end
        return self.rows


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return JsonlReader(path).refresh()


def read_result(run_dir: Path) -> dict[str, Any] | None:
    """result.json, or None while the trainer has not written it (or wrote garbage)."""
    try:
        data = json.loads((run_dir / "result.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_checkpoints(run_dir: Path, run_name: str) -> list[dict[str, Any]]:
    return read_jsonl(run_dir / "checkpoints" / run_name / "checkpoints.jsonl")


def downsample(rows: list[dict[str, Any]], max_points: int) -> list[dict[str, Any]]:
    """At most `max_points` rows, evenly spaced, always keeping the first and the last."""
    if len(rows) <= max_points:
        return list(rows)
    if max_points <= 1:
        return rows[-1:]
    last = len(rows) - 1
    idx = sorted({round(i * last / (max_points - 1)) for i in range(max_points)})
    return [rows[i] for i in idx]


def latest_metrics(metrics: list[dict[str, Any]], evals: list[dict[str, Any]]) -> dict[str, Any]:
    """The newest step's headline numbers plus the newest eval accuracy."""
    out: dict[str, Any] = {k: None for k in LATEST_KEYS}
    if metrics:
        out.update({k: metrics[-1].get(k) for k in LATEST_KEYS})
    out["eval_accuracy"] = evals[-1].get("eval_accuracy") if evals else None
    out["eval_step"] = evals[-1].get("step") if evals else None
    return out


def eta_seconds(metrics: list[dict[str, Any]], total_steps: int) -> float | None:
    """Remaining steps times the mean wall time per step seen so far."""
    if not metrics:
        return None
    done = int(metrics[-1].get("step", len(metrics)))
    remaining = max(total_steps - done, 0)
    if remaining == 0:
        return 0.0
    times = [m.get("time") for m in metrics if isinstance(m.get("time"), (int, float))]
    if len(times) >= 2:
        per_step = (times[-1] - times[0]) / (len(times) - 1)
    else:
        secs = [m.get("step_seconds") for m in metrics if isinstance(m.get("step_seconds"), (int, float))]
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


async def wandb_summary(
    run_name: str, project: str, *, timeout_s: float = 15.0
) -> dict[str, Any] | None:
    """URL, state and numeric summary of the W&B run logged as `project`/`run_name`.

    None when WANDB_API_KEY is unset (offline files then sit in run_dir/wandb, syncable with
    `wandb sync`). Errors and timeouts come back as {"error": ...}: never raised, never blocking.
    """
    if not os.environ.get("WANDB_API_KEY"):
        return None
    try:
        with anyio.fail_after(timeout_s):
            return await anyio.to_thread.run_sync(
                _wandb_lookup, run_name, project, abandon_on_cancel=True
            )
    except TimeoutError:
        return {"error": f"W&B did not answer within {timeout_s:.0f} s"}
    except Exception as exc:  # network, auth, missing run: W&B is optional by contract
        return {"error": f"W&B lookup failed: {exc}"}


def _wandb_lookup(run_name: str, project: str) -> dict[str, Any]:
    import wandb  # heavy: only when a key is set

    api = wandb.Api(timeout=10)
    entity = os.environ.get("WANDB_ENTITY") or api.default_entity
    runs = api.runs(f"{entity}/{project}", filters={"display_name": run_name}, order="-created_at", per_page=1)
    run = next(iter(runs), None)  # the newest run of that name
    if run is None:
        return {"error": f"no W&B run named {run_name!r} in {entity}/{project}"}
    summary = {
        k: v for k, v in dict(run.summary).items() if isinstance(v, (int, float)) and not k.startswith("_")
    }
    return {"url": run.url, "state": run.state, "entity": entity, "project": project, "summary": summary}
