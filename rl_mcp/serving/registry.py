"""The served models' records, one file in each model's folder (`served/<model>/served.json`,
written atomically): what a server lifetime, or `mcp-server-rl serve-model` beside it, started, so
the next one lists, re-adopts and stops it (pid and start time name the process, as for runs)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from tinker_atropos.run_files import ServedModelFiles, atomic_write_text

log = logging.getLogger(__name__)


@dataclass
class ServedRecord:
    model: str  # `<run_id>@<checkpoint>`: the served name and the folder's
    run_id: str
    checkpoint: str
    checkpoint_step: int | None
    chosen_because: str
    weights: str  # the checkpoint served (an adapter folder, or tinker://)
    base_model: str
    backend: str  # where the weights are sampled: local or tinker
    sampler: str  # engine, vllm or tinker
    port: int
    pid: int
    create_time: float
    started_at: float
    folder: str
    estimate_bytes: int | None  # the memory reckoned before the start (memory.py)
    estimate_basis: str
    available_bytes: int  # the room it was checked against
    status: Literal["starting", "ready"] = "starting"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def files(self) -> ServedModelFiles:
        return ServedModelFiles(Path(self.folder))

    @property
    def log(self) -> Path:
        return self.files.server_log


class ServedRegistry:
    def __init__(self, root: Path) -> None:
        self.root = root

    def files(self, model: str) -> ServedModelFiles:
        return ServedModelFiles(self.root / model)

    def save(self, rec: ServedRecord) -> None:
        atomic_write_text(rec.files.record, json.dumps(asdict(rec), indent=1))

    def remove(self, model: str) -> None:
        """The record only: the folder keeps the log of what was served."""
        self.files(model).record.unlink(missing_ok=True)

    def records(self) -> list[ServedRecord]:
        """Every readable record, oldest first."""
        found = (_read(path) for path in self.root.glob(f"*/{ServedModelFiles(Path()).record.name}"))
        return sorted((r for r in found if r is not None), key=lambda r: r.started_at)

    def get(self, model: str) -> ServedRecord | None:
        return _read(self.files(model).record)


def _read(path: Path) -> ServedRecord | None:
    """The record at `path`; None where there is none, or it is unreadable (logged)."""
    try:
        return ServedRecord(**json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as exc:
        log.warning("served-model record %s is unreadable (%s): left out", path, exc)
        return None
