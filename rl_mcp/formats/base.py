"""What an environment format provides: how its environments are found, how their fields are read,
which runtime they need, how their environment process is hosted, and which findings it adds.

A format is one folder of `rl_mcp/formats/` with an `EnvironmentFormat` in its `__init__.py` (or a
module of another package named in the entry-point group `rl_mcp.formats`); the registry
(`rl_mcp/formats/__init__.py`) lists them. Every hook has a default that adds nothing, so a format
overrides only what it does. Nothing here imports an environment: the server stays light.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from rl_mcp.environments.packages.folder import PackageFolder
from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo

if TYPE_CHECKING:
    from rl_mcp.diagnosis.facts import RunFacts
    from rl_mcp.diagnosis.findings import Finding, NextStep

Rule = Callable[["RunFacts"], "Finding | None"]

# What the guide adds for an environment of tool calls (an agent's, a tool server's).
TOOL_CALLS_NOTE = (
    " A small model that never writes a tool call learns nothing from RL alone (every rollout scores the "
    "same): where rl_test_inference shows no tool calls, set `sft` (rl_edit_config(field='sft', value="
    "{'sources': ['demonstrations']}), or 'file' with a JSONL of conversations that call its tools), look "
    "at what it would train on with rl_preview_sft, and the run trains a supervised stage before RL."
)


@dataclass(frozen=True)
class Section:
    """A config section of a format's own, beside `env` and `trainer`."""

    name: str
    env_key: str  # the env key its edited fields go under, as one mapping
    summary: str  # what its fields are (rl_get_current_config's `section`)


@dataclass(frozen=True)
class Places:
    """Where a scan looks beyond the env dirs (a format's own files and venvs): the server's home
    and environment variables. None: the env dirs alone (a scan in a test, the doctor's first look)."""

    home: Path | None = None
    environ: Mapping[str, str] | None = None


@dataclass(frozen=True)
class FieldPlaces:
    """What a format's fields may depend on at a selection: the server's home and variables, and an
    environment folder's own venv (installed when a run or test needs it)."""

    home: Path
    environ: Mapping[str, str]
    venv_of: Callable[[PackageFolder], Path | None]


def folders_holding(env_dir: Path, manifest: str, max_depth: int = 3) -> list[Path]:
    """The folders under an env dir that hold `manifest` (not inside one another), to `max_depth`:
    a folder-based format's environments."""
    out: list[Path] = []
    base = len(env_dir.parts)
    for dirpath, dirnames, filenames in os.walk(env_dir):
        here = Path(dirpath)
        if manifest in filenames:
            out.append(here)
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")) and len(here.parts) - base < max_depth)
    return out


class EnvironmentFormat:
    """One environment format. Class attributes say what it is; methods are its hooks."""

    name: ClassVar[str] = ""
    # a clause of rl_list_environments' `format` description: what such an environment is
    summary: ClassVar[str] = ""
    # what the guide tells an agent about a selected environment of this format
    note: ClassVar[str] = ""
    # class-based formats: a class with one of these among its ancestors (by name) is of this format;
    # where two formats' ancestors are reached, the later-registered (the more specific) wins
    ancestors: ClassVar[frozenset[str]] = frozenset()
    # its own config sections
    sections: ClassVar[tuple[Section, ...]] = ()
    # a runtime of its own (rl_mcp/runtimes/catalog.py), made before its environment runs; None:
    # the training runtime
    runtime: ClassVar[str | None] = None
    # listed by name only, in a task catalog beside its host (106 tasks would bury the rest)
    catalogued: ClassVar[bool] = False
    # the rules (facts -> finding) it adds to the diagnosis of its runs
    rules: ClassVar[tuple[Rule, ...]] = ()
    # its environments may show a demonstrated rollout per group (`demonstrations_per_group`)
    demonstrations: ClassVar[bool] = True

    # --- how it is found -------------------------------------------------------------------------

    def serves_folder(self, filenames: Sequence[str]) -> bool:
        """A folder this format serves as a whole: its Python files are not scanned."""
        return False

    def folders(self, env_dir: Path) -> list[Path]:
        """The folders of `env_dir` it serves (read before the scan)."""
        return []

    def read_module(self, tree: ast.Module) -> Any:
        """What a scanned file (parsed, never imported) holds of this format, cached with its parse;
        None when nothing. A file-based format's environments come from it (`file_environment`)."""
        return None

    def file_environment(
        self, found: Any, path: Path, env_dir: Path, package: PackageFolder | None
    ) -> EnvironmentInfo | None:
        """The environment a file is, from what `read_module` found in it."""
        return None

    def listed_as(
        self, host: EnvironmentInfo, places: Places, folders: list[Path], errors: list[dict[str, str]]
    ) -> list[EnvironmentInfo] | None:
        """What a discovered class is listed as when this format hosts its environments with it
        (the class itself among them or not); None: not its host class. Problems go to `errors`."""
        return None

    def installed(self, places: Places) -> list[EnvironmentInfo]:
        """Environments installed outside the env dirs (listed after them: a file there shadows one)."""
        return []

    # --- its fields ------------------------------------------------------------------------------

    def fields_of(self, info: EnvironmentInfo) -> EnvironmentInfo:
        """The class whose fields the introspection child reads for `info`: itself by default, else the
        host class that runs it (whose fields `schema` then makes its own)."""
        return info

    def schema(self, info: EnvironmentInfo, read: ConfigSchema, places: FieldPlaces) -> ConfigSchema:
        """`info`'s fields from what the child read (its host's, or the product's own): its own
        added, what its run sets taken out, and the run's source (`run_source`) set."""
        return read

    # --- how it runs -----------------------------------------------------------------------------

    def process_file(self, env_file: Path) -> Path | None:
        """The file an environment process runs for an environment in `env_file`, when it is not
        that file (a host that drives it); None: the file itself, or not this format's."""
        return None

    def refusal(self, info: EnvironmentInfo) -> str | None:
        """Why `info` cannot run here (refused before anything starts); None: it can."""
        return None

    def runs(self, env: Mapping[str, Any]) -> bool:
        """Whether a run's env section (its config.yaml) is one of this format's environments."""
        return False

    # --- what the diagnosis adds -----------------------------------------------------------------

    def next_step(self, finding: str, facts: RunFacts, ways_out: str) -> NextStep | None:
        """A next step of its own for a generic finding (`finding` its code) on one of its runs;
        None: the finding's own."""
        return None
