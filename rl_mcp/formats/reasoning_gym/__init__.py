"""reasoning-gym's tasks, each an environment `reasoning_gym:<task>`: a run of the bundled
`ReasoningGymEnv` with `task` set, listed beside it from the catalog shipped with it (`catalog.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo, FieldSpec
from rl_mcp.formats.base import EnvironmentFormat, FieldPlaces, Places, Section
from rl_mcp.formats.reasoning_gym.catalog import SET_BY_TASK, TaskEntry, is_task_host, task_entries, task_fields

SECTION = "task"


class ReasoningGymFormat(EnvironmentFormat):
    name = "reasoning-gym"
    summary = "one task of the reasoning-gym package, run by the bundled reasoning_gym environment"
    note = " It is a reasoning-gym task: the fields in section `task` are its generator's settings (difficulty, sizes)."
    sections = (Section(SECTION, "task_config", "a reasoning-gym task's generator settings"),)
    catalogued = True

    def __init__(self) -> None:
        self._tasks: dict[EnvironmentInfo, tuple[tuple[TaskEntry, ...], list[EnvironmentInfo]]] = {}

    def listed_as(
        self, host: EnvironmentInfo, places: Places, folders: list[Path], errors: list[dict[str, str]]
    ) -> list[EnvironmentInfo] | None:
        """The host itself, then each task; rebuilt only when the catalog changes."""
        if not is_task_host(host.file, host.class_name):
            return None
        entries = task_entries()
        hit = self._tasks.get(host)
        if hit is None or hit[0] is not entries:
            tasks = [
                replace(
                    host,
                    name=e.name,
                    description=e.description,
                    config_class=e.config_class,
                    format=self.name,
                    entry=e.task,
                )
                for e in entries
            ]
            hit = self._tasks[host] = (entries, tasks)
        return [host, *hit[1]]

    def schema(self, info: EnvironmentInfo, read: ConfigSchema, places: FieldPlaces) -> ConfigSchema:
        """Its host's fields (less `task` and `task_config`, which the task sets), then the task
        generator's settings (section `task`); a setting named as a run field is fixed."""
        fields = {n: f for n, f in read.fields.items() if n not in SET_BY_TASK}
        for name, spec in task_fields(info.entry).items():
            fields.setdefault(name, FieldSpec(name=name, section=SECTION, **spec))
        return ConfigSchema(
            environment=info.name,
            config_class=info.config_class,
            fields=fields,
            defs=read.defs,
            training_error=read.training_error,
            run_source={"task": info.entry},
            section_keys={s.name: s.env_key for s in self.sections},
        )

    def runs(self, env: Mapping[str, Any]) -> bool:
        return bool(env.get("task")) and "task_config" in env


FORMAT = ReasoningGymFormat()
