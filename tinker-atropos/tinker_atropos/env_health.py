"""What an environment process reports about its rollouts: scored groups and the latest exception.

atroposlib catches an exception from `collect_trajectories`, logs one line without its type or
where it was raised, and tries the next item, forever: a run whose every rollout raises sits at
`running` with the trainer waiting for a batch. The launcher installs this recorder, which wraps
each environment's `collect_trajectories` and keeps `env_health.json` (docs/run-files.md) current,
so the server can show the exception within seconds and fail a run that only raises.
"""

from __future__ import annotations

import json
import os
import sysconfig
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinker_atropos.run_files import atomic_write_text

_LIBRARY_DIRS = tuple({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"]})


@dataclass
class Health:
    groups: int = 0
    errors: int = 0
    last_group_at: float | None = None
    last_error: dict[str, Any] | None = None  # type, message, where, at
    started_at: float = field(default_factory=time.time)


def where(exc: BaseException) -> str:
    """The innermost frame of the traceback in the user's code (not in a library), as file:line in func."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not f.filename.startswith(_LIBRARY_DIRS)] or frames
    if not own:
        return "unknown"
    frame = own[-1]
    return f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}"


class HealthRecorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.health = Health()
        self._write()

    def scored(self) -> None:
        self.health.groups += 1
        self.health.last_group_at = time.time()
        self._write()

    def raised(self, exc: BaseException) -> None:
        self.health.errors += 1
        message = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else ""
        self.health.last_error = {
            "type": type(exc).__name__,
            "message": message,
            "where": where(exc),
            "at": time.time(),
        }
        self._write()

    def _write(self) -> None:
        atomic_write_text(self.path, json.dumps(asdict(self.health)))


def install(path: Path) -> None:
    """Record every environment instance's `collect_trajectories` (created after this call)."""
    from atroposlib.envs.base import BaseEnv

    recorder = HealthRecorder(path)
    original_init = BaseEnv.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        collect = self.collect_trajectories

        async def collect_trajectories(item: Any) -> Any:
            try:
                result = await collect(item)
            except Exception as exc:
                recorder.raised(exc)
                raise
            if isinstance(result, tuple) and result and result[0]:
                recorder.scored()
            return result

        self.collect_trajectories = collect_trajectories

    BaseEnv.__init__ = __init__  # type: ignore[method-assign]
