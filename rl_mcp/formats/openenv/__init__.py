"""OpenEnv environments, each `openenv:<name>`: a folder with an `openenv.yaml` under the env dirs, an
installed `openenv-*` distribution of the OpenEnv runtime, or a running server the user names by URL
(`entries.py`). Each is a run of the bundled `OpenEnvEnv` (an agent environment) with its source set;
a folder's server runs from its own venv, layered on the OpenEnv runtime."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rl_mcp.diagnosis.next_steps import edit
from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo
from rl_mcp.formats.base import EnvironmentFormat, FieldPlaces, Places
from rl_mcp.formats.openenv.entries import (
    SET_BY_SERVER,
    OpenEnvEntry,
    entries,
    folders_in,
    is_host,
    is_manifest_among,
    run_source,
    servers_path,
)
from rl_mcp.formats.openenv.findings import episodes_never_done
from tinker_atropos.venvs import GENERATIONS

if TYPE_CHECKING:
    from rl_mcp.diagnosis.facts import RunFacts
    from rl_mcp.diagnosis.findings import NextStep

NAME = "openenv"
# It has no demonstrations: a typed action a reply can fill is taken in words, else the supervised
# stage learns the calls from a file or a teacher.
TEXT_HOW = (
    "with action_mode 'text' the model's plain reply is the action (its one required field, a string), which "
    "a model that writes no call does from the first step; a start refuses it, naming the action's fields, "
    "where the action has other required fields (then a supervised stage from a file or a teacher)"
)
SFT_START = {"sources": ["file"], "file": "<path>", "epochs": 3}
SFT_HOW = (
    "the environment has no demonstrations: 'file' with a JSONL of conversations that call its tools, or "
    "sources ['teacher'] with teacher {base_url, model, api_key_var} or {adapter: an earlier run's final_weights}; "
    "rl_preview_sft shows the examples first; then start a new run"
)


class OpenEnvFormat(EnvironmentFormat):
    name = NAME
    summary = (
        "an OpenEnv environment (a folder with an openenv.yaml, served from its own venv, or a running server by URL)"
    )
    note = (
        " It is an OpenEnv environment, served from its own venv: each rollout is one episode "
        "(reset with an item's arguments, its observation the first message; then a step per action, until "
        "`done` or max_agent_turns), scored by its step rewards summed. An MCP environment offers its own tools. "
        "A typed one's action is, by `action_mode`, the model's plain reply ('text': its one required field, a "
        "string; the default where the action fits, so a model that writes no tool call still acts) or the tool "
        "`step` ('tool'). "
        '`items_file` (a JSONL of {"reset": {...}}) sets the episodes; else its own Task API, else seeds.'
        " It has no demonstrations: a model that calls no tool gets `sft` from a 'file' of "
        "conversations or a 'teacher' (rl_preview_sft shows the examples)."
    )
    runtime = NAME
    rules = (episodes_never_done,)
    demonstrations = False

    def serves_folder(self, filenames: Sequence[str]) -> bool:
        return is_manifest_among(list(filenames))

    def folders(self, env_dir: Path) -> list[Path]:
        return folders_in(env_dir)

    def listed_as(
        self, host: EnvironmentInfo, places: Places, folders: list[Path], errors: list[dict[str, str]]
    ) -> list[EnvironmentInfo] | None:
        """Every OpenEnv environment in place of the host class: the env dirs' folders, the OpenEnv
        runtime's installed distributions and the servers file's."""
        if not is_host(host.file, host.class_name):
            return None
        environ = places.environ
        python = GENERATIONS[NAME].python(environ) if environ is not None else None
        servers = servers_path(environ, places.home) if environ is not None and places.home else None
        found, problems = entries(folders, python, servers)
        errors += problems
        return [
            dataclasses.replace(host, name=e.name, description=e.description, format=NAME, entry=e, package=e.package)
            for e in found
        ]

    def fields_of(self, info: EnvironmentInfo) -> EnvironmentInfo:
        """OpenEnvEnv's, read in the product's venv (its folder is installed when a run or test needs
        it, not at a selection)."""
        return dataclasses.replace(info, package=None, entry=None)

    def schema(self, info: EnvironmentInfo, read: ConfigSchema, places: FieldPlaces) -> ConfigSchema:
        entry: OpenEnvEntry = info.entry
        venv = places.venv_of(info.package) if info.package else None
        python = venv / "bin" / "python" if venv else GENERATIONS[NAME].python(places.environ)
        source = run_source(entry.folder, entry.url, str(python))
        return read.without(SET_BY_SERVER, environment=info.name, run_source=source)

    def refusal(self, info: EnvironmentInfo) -> str | None:
        entry: OpenEnvEntry = info.entry
        return entry.error  # a Hub or Docker source, a folder without its app

    def runs(self, env: Mapping[str, Any]) -> bool:
        return any(env.get(k) for k in SET_BY_SERVER)  # its folder or URL

    def next_step(self, finding: str, facts: RunFacts, ways_out: str) -> NextStep | None:
        """No tool call made: the action taken in words where it was a tool by choice (or the run
        predates action_mode), else a supervised stage from a file or a teacher."""

        if finding != "no_tool_calls":
            return None
        if facts.env.get("action_mode", "tool") == "tool":
            return edit("action_mode", "text", f"{ways_out}: {TEXT_HOW}")
        if "sft" in facts.env and not facts.env.get("sft"):
            return edit("sft", SFT_START, f"{ways_out}: a supervised stage before RL teaches it ({SFT_HOW})")
        return None


FORMAT = OpenEnvFormat()
