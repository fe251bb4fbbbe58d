"""Hermes task sets, each `hermes-tasks:<folder>`: a folder holding a `hermes-tasks.yaml` under the env
dirs (the bundled examples among them), trained inside hermes-agent itself. Each is a run of the bundled
`HermesTasksEnv` with its folder and the hermes runtime's `hermes` set; a task file that cannot run is
listed with why and refused at select, naming the item and the field."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo
from rl_mcp.errors import UserError
from rl_mcp.formats.base import TOOL_CALLS_NOTE, EnvironmentFormat, FieldPlaces, Places
from rl_mcp.formats.hermes_tasks.entries import (
    HERMES_OWN,
    SET_BY_SERVER,
    TaskSetEntry,
    entries,
    folders_in,
    is_host,
    run_source,
)
from rl_mcp.formats.hermes_tasks.findings import hermes_episodes_failed
from rl_mcp.runtimes.catalog import HERMES
from tinker_atropos.hermes_harness.task_set import TASKS_FILE

NAME = "hermes-tasks"


class HermesTasksFormat(EnvironmentFormat):
    name = NAME
    summary = "a Hermes task set (a folder with a hermes-tasks.yaml), each episode a run of the real hermes-agent"
    note = (
        " It is a Hermes task set: each rollout is one episode of hermes-agent 0.19 itself (`hermes -z`, its own "
        "system prompt, tools and loop) in a fresh sandbox holding the item's files, against the run's inference "
        "server; the item's check then runs in that sandbox. The trainer learns from the tokens the server "
        "sampled for the episode. Hermes' fixed prompt is several thousand tokens: the start is refused with the "
        "figures when the model's context leaves too little for a turn (fewer toolsets in the task file, or a "
        "longer-context model)." + TOOL_CALLS_NOTE
    )
    runtime = HERMES.name
    rules = (hermes_episodes_failed,)
    demonstrations = False

    def serves_folder(self, filenames: Sequence[str]) -> bool:
        return TASKS_FILE in filenames

    def folders(self, env_dir: Path) -> list[Path]:
        return folders_in(env_dir)

    def listed_as(
        self, host: EnvironmentInfo, places: Places, folders: list[Path], errors: list[dict[str, str]]
    ) -> list[EnvironmentInfo] | None:
        """Every task set in place of the host class: the env dirs' folders."""
        if not is_host(host.file, host.class_name):
            return None
        return [
            dataclasses.replace(host, name=e.name, description=e.description, format=NAME, entry=e)
            for e in entries(folders)
        ]

    def schema(self, info: EnvironmentInfo, read: ConfigSchema, places: FieldPlaces) -> ConfigSchema:
        """Its fields, or the task file's error at select: an item that cannot run is refused there."""
        entry: TaskSetEntry = info.entry
        if entry.error:
            raise UserError(f"environment {info.name!r} cannot run: {entry.error}")
        return read.without(
            SET_BY_SERVER + HERMES_OWN, environment=info.name, run_source=run_source(entry.folder, places.environ)
        )

    def refusal(self, info: EnvironmentInfo) -> str | None:
        entry: TaskSetEntry | None = info.entry
        return entry.error if entry else None

    def runs(self, env: Mapping[str, Any]) -> bool:
        return bool(env.get(SET_BY_SERVER[0]))


FORMAT = HermesTasksFormat()
