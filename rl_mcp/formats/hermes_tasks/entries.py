"""Hermes task sets as `hermes-tasks:<folder name>`: every folder under the env dirs holding a
`hermes-tasks.yaml`, read (never run) here; one that cannot run is listed with why."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rl_mcp.formats.base import folders_holding
from rl_mcp.settings import BUNDLED_ENV_DIR
from tinker_atropos.hermes_harness.task_set import TASKS_FILE, TaskSetError, read_task_set
from tinker_atropos.venvs import hermes_bin

PREFIX = "hermes-tasks:"
ENV_FILE = BUNDLED_ENV_DIR / "hermes_tasks_env.py"
ENV_CLASS = "HermesTasksEnv"
SET_BY_SERVER = ("tasks_folder", "hermes_bin")
# the product's agent loop's settings, which Hermes' own loop replaces (its toolsets, turns and time limit
# are the task file's): not shown, not edited
HERMES_OWN = (
    "enabled_toolsets", "disabled_toolsets", "distribution", "max_agent_turns", "system_prompt", "terminal_network",
    "terminal_timeout", "dataset_name", "dataset_split", "prompt_field", "tool_call_parser", "extra_body",
    "demonstrations_per_group", "default_result_size_chars", "turn_budget_chars", "preview_size_chars",
    "tool_result_overrides",
)  # fmt: skip


@dataclass(frozen=True)
class TaskSetEntry:
    name: str  # hermes-tasks:<folder name>
    description: str
    folder: Path
    error: str | None = None  # why it cannot run (listed, not dropped)


def is_host(file: Path, class_name: str) -> bool:
    """Whether this class is the bundled HermesTasksEnv (listed through its task sets, not by itself)."""
    return class_name == ENV_CLASS and file.resolve() == ENV_FILE.resolve()


def folder_entry(folder: Path) -> TaskSetEntry:
    name = f"{PREFIX}{folder.name}"
    try:
        tasks = read_task_set(folder)
    except TaskSetError as exc:
        return TaskSetEntry(name, f"unusable: {exc}", folder, error=str(exc))
    train, held = len(tasks.train()), len(tasks.held_out())
    said = tasks.description or f"the Hermes task set in {folder}"
    return TaskSetEntry(
        name, f"{said} ({train} training items, {held} held out; toolsets {','.join(tasks.toolsets)})", folder
    )


def folders_in(env_dir: Path) -> list[Path]:
    return folders_holding(env_dir, TASKS_FILE)


def entries(folders: list[Path]) -> list[TaskSetEntry]:
    return [folder_entry(f) for f in folders]


def run_source(folder: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """What a run of a task set is told: its folder and the hermes runtime's `hermes`."""
    return {"tasks_folder": str(folder), "hermes_bin": str(hermes_bin(environ))}
