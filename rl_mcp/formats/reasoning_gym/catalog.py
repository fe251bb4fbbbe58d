"""reasoning-gym's tasks as environments, read from the catalog shipped beside the bundled environment.

Each task is listed as `reasoning_gym:<task>`: a run of the bundled `ReasoningGymEnv` with `task` set,
whose config fields are that environment's, less `task` and `task_config`, plus the task generator's
settings (section `task`, rendered into `task_config`). Nothing is imported: the catalog is JSON
(tinker_atropos/environments/reasoning_gym_catalog.py makes it).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_mcp.settings import BUNDLED_ENV_DIR

PREFIX = "reasoning_gym:"
ENV_FILE = BUNDLED_ENV_DIR / "reasoning_gym_tasks.py"
ENV_CLASS = "ReasoningGymEnv"
CATALOG_FILE = BUNDLED_ENV_DIR / "reasoning_gym_catalog.json"
SET_BY_TASK = ("task", "task_config")  # a task environment's own: not fields a user edits


def catalog() -> dict[str, Any]:
    st = CATALOG_FILE.stat()
    return _catalog(CATALOG_FILE, (st.st_mtime_ns, st.st_size))


@functools.cache
def _catalog(path: Path, stamp: tuple[int, int]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


@dataclass(frozen=True)
class TaskEntry:
    name: str  # reasoning_gym:<task>
    task: str
    description: str
    config_class: str


def is_task_host(file: Path, class_name: str) -> bool:
    """Whether this environment class is the bundled ReasoningGymEnv, whose tasks are listed too."""
    return class_name == ENV_CLASS and file.resolve() == ENV_FILE.resolve()


def task_entries() -> tuple[TaskEntry, ...]:
    """The catalog's tasks; the same tuple while the catalog file is unchanged (discovery asks on
    every scan and reuses what it built from the last one)."""
    st = CATALOG_FILE.stat()
    return _entries(st.st_mtime_ns, st.st_size)


@functools.cache
def _entries(mtime_ns: int, size: int) -> tuple[TaskEntry, ...]:
    data = _catalog(CATALOG_FILE, (mtime_ns, size))
    return tuple(
        TaskEntry(
            f"{PREFIX}{task}",
            task,
            f"{entry['description']} ({data['package']} {data['version']} task {task!r})",
            entry["config_class"],
        )
        for task, entry in data["tasks"].items()
    )


def task_fields(task: str) -> dict[str, dict[str, Any]]:
    """The task generator's settings as field specs (type, default, description, json_schema)."""
    entry = catalog()["tasks"].get(task)
    if entry is None:
        raise KeyError(f"reasoning-gym task {task!r} is not in {CATALOG_FILE}")
    fields: dict[str, dict[str, Any]] = entry["fields"]
    return fields
