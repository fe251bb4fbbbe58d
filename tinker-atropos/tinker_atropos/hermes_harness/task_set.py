"""A Hermes task set: the `hermes-tasks.yaml` of a folder, read and checked (pydantic and PyYAML only:
the server reads it to list and refuse, the environment process to run it).

Each item is a prompt Hermes gets in a fresh sandbox, the files placed there first, and how the
episode is scored: a shell `check` run in the same sandbox afterwards (exit 0 passes, or scores the
number its last line prints), or the folder's `score.py` (`score(item, episode, sandbox)`). The set also names
the toolsets Hermes runs with, its version, the turn and time limits of an episode and which items
are held out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

TASKS_FILE = "hermes-tasks.yaml"
SCORE_FILE = "score.py"
HERMES_VERSION = "0.19.0"  # the hermes-agent the product pins (its `hermes` runtime)
TOOLSETS = ("terminal", "file", "web", "browser", "code_execution", "vision", "skills", "todo", "memory")


class TaskSetError(ValueError):
    """A task file that cannot run; the message names the item and the field."""


class HermesTask(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9_.-]+$")
    prompt: str = Field(min_length=1, description="What the user asks Hermes (its -z prompt).")
    files: dict[str, str] = Field(default_factory=dict, description="Files placed in the sandbox first.")
    check: str | None = Field(
        default=None,
        description="A shell command run in the sandbox after the episode: a non-zero exit scores 0; exit 0 "
        "scores the number its last line prints (0..1), else 1.",
    )
    split: Literal["train", "held_out"] = "train"

    @field_validator("files")
    @classmethod
    def _relative(cls, files: dict[str, str]) -> dict[str, str]:
        for name in files:
            parts = Path(name).parts
            if not name or Path(name).is_absolute() or ".." in parts:
                raise ValueError(f"{name!r} must be a path inside the sandbox (relative, no '..')")
        return files


class HermesTaskSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = ""
    toolsets: list[str] = Field(default_factory=lambda: ["terminal", "file"], min_length=1)
    hermes_version: str = HERMES_VERSION
    max_turns: int = Field(default=8, ge=1, le=90, description="Hermes' agent.max_turns for an episode.")
    episode_timeout_s: float = Field(default=300.0, gt=0, le=3600, description="An episode past it is cut, scored 0.")
    items: list[HermesTask] = Field(min_length=1)

    @field_validator("toolsets")
    @classmethod
    def _known(cls, toolsets: list[str]) -> list[str]:
        unknown = [t for t in toolsets if t not in TOOLSETS]
        if unknown:
            raise ValueError(f"unknown toolset {unknown[0]!r}: choose from {', '.join(TOOLSETS)}")
        return toolsets

    @field_validator("hermes_version")
    @classmethod
    def _pinned(cls, version: str) -> str:
        if version != HERMES_VERSION:
            raise ValueError(
                f"hermes-agent {version} is not the one the product runs: episodes run in hermes-agent "
                f"{HERMES_VERSION} (its `hermes` runtime); set hermes_version: {HERMES_VERSION!r} or leave it out"
            )
        return version

    @model_validator(mode="after")
    def _distinct(self) -> HermesTaskSet:
        seen: set[str] = set()
        for item in self.items:
            if item.id in seen:
                raise ValueError(f"item id {item.id!r} appears twice: ids must be distinct")
            seen.add(item.id)
        return self

    def train(self) -> list[HermesTask]:
        return [i for i in self.items if i.split == "train"]

    def held_out(self) -> list[HermesTask]:
        return [i for i in self.items if i.split == "held_out"]


def _where(loc: tuple[int | str, ...], raw: object) -> str:
    """A validation error's place: `item 2 ('greeting'): check` rather than `items.1.check`."""
    if len(loc) >= 2 and loc[0] == "items" and isinstance(loc[1], int):
        items = raw.get("items") if isinstance(raw, dict) else None
        entry = items[loc[1]] if isinstance(items, list) and loc[1] < len(items) else None
        name = f" ({entry.get('id')!r})" if isinstance(entry, dict) and entry.get("id") else ""
        rest = ".".join(str(p) for p in loc[2:])
        return f"item {loc[1] + 1}{name}" + (f": {rest}" if rest else "")
    return ".".join(str(p) for p in loc) or "the file"


def read_task_set(folder: Path) -> HermesTaskSet:
    """The folder's task set, or TaskSetError naming the item and the field."""
    path = folder / TASKS_FILE
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise TaskSetError(f"{path}: cannot be read as YAML ({exc})") from None
    try:
        tasks = HermesTaskSet.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        said = first["msg"].removeprefix("Value error, ")
        raise TaskSetError(f"{path}: {_where(tuple(first['loc']), raw)}: {said}") from None
    scored_by_file = (folder / SCORE_FILE).is_file()
    for n, item in enumerate(tasks.items, 1):
        if item.check is None and not scored_by_file:
            raise TaskSetError(
                f"{path}: item {n} ({item.id!r}): check: missing, and the folder has no {SCORE_FILE}: give the "
                "item a shell check (exit 0 passes) or write score(item, episode, sandbox) in score.py"
            )
    if not tasks.train():
        raise TaskSetError(f"{path}: items: every item is held out: keep at least one with split: train")
    return tasks
