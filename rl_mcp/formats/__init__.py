"""The environment formats, one folder each (base.py says what a format provides). A new format is a
folder here and a line in BUILT_IN, or an `EnvironmentFormat` in another installed package named in
the entry-point group `rl_mcp.formats` (the server's venv must have it). rl_list_environments lists
every format's environments; the rest of the product asks the registry, never a format by name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rl_mcp.formats import atropos, hermes, hermes_tasks, mcp, openenv, reasoning_gym, verifiers
from rl_mcp.formats.base import EnvironmentFormat, Rule
from tinker_atropos.plugins import registry

ENTRY_POINT_GROUP = "rl_mcp.formats"
# The order of rl_list_environments' `format` values; a later class-based format is the more specific.
BUILT_IN: tuple[EnvironmentFormat, ...] = (
    atropos.FORMAT,
    hermes.FORMAT,
    *verifiers.FORMATS,
    reasoning_gym.FORMAT,
    mcp.FORMAT,
    openenv.FORMAT,
    hermes_tasks.FORMAT,
)
FORMATS: dict[str, EnvironmentFormat] = registry(BUILT_IN, ENTRY_POINT_GROUP, EnvironmentFormat, "environment format")
NAMES = tuple(FORMATS)
# Every class-based format's ancestors: a scanned class reaching one of them is an environment.
ANCESTORS = frozenset().union(*(f.ancestors for f in FORMATS.values()))
# Every format's own config section (name -> what its fields are), after `env` and `tinker`.
SECTIONS = {s.name: s.summary for f in FORMATS.values() for s in f.sections}


def class_format(reaches: Callable[[frozenset[str]], bool]) -> str:
    """The format of a class by its ancestors (`reaches(names)`: one of them is among them): the
    last-registered whose ancestors it reaches."""
    return [f.name for f in FORMATS.values() if f.ancestors and reaches(f.ancestors)][-1]


def described() -> str:
    """rl_list_environments' `format` description: every format's clause."""
    return "; ".join(f"{f.name}: {f.summary}" for f in FORMATS.values())


def process_file(env_file: Path) -> Path:
    """The file an environment process runs for the environment in `env_file` (a format's host, or
    the file itself)."""
    return next((p for f in FORMATS.values() if (p := f.process_file(env_file)) is not None), env_file)


def of_run(env: Mapping[str, Any]) -> EnvironmentFormat | None:
    """The format whose environment a run's env section runs, where one says so (None: a class's)."""
    return next((f for f in FORMATS.values() if f.runs(env)), None)


def rules() -> tuple[Rule, ...]:
    """The diagnosis rules the formats add."""
    return tuple(rule for f in FORMATS.values() for rule in f.rules)
