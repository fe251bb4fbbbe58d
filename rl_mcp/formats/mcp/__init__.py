"""The user's MCP tool servers as environments, each `mcp:<server>`: a run of the bundled
`McpToolsEnv` (an agent environment) with `mcp_server` set (`servers.py`). Their tools are listed by
`rl_mcp/tool_servers/`, and tasks for them written by `rl_write_mcp_tasks`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo
from rl_mcp.formats.base import TOOL_CALLS_NOTE, EnvironmentFormat, FieldPlaces, Places
from rl_mcp.formats.mcp.servers import SET_BY_SERVER, ServerEntry, is_host, run_source, server_entries
from tinker_atropos.mcp_tools.servers_file import servers_path

NOTE = (
    " It is one of the user's MCP tool servers: every tool call of a rollout is a real MCP tools/call. "
    "It needs tasks: read the server's tools in rl_list_environments (`tool_servers`) and write them with "
    "rl_write_mcp_tasks(server, tasks) before step 3 (or set `tasks_file`). `tools` is the allow-list "
    "(default: the read-only tools); `reward` is `check` (each task's check, partial credit for a correct "
    "call) or `judge` (a judge model ranks each group; judge_base_url, judge_model). A small local model "
    "often makes no tool call at all at first: rl_test_inference's trajectories show it."
)


class McpToolsFormat(EnvironmentFormat):
    name = "mcp"
    summary = "one of the user's MCP tool servers (see `tool_servers`)"
    note = NOTE + TOOL_CALLS_NOTE

    def listed_as(
        self, host: EnvironmentInfo, places: Places, folders: list[Path], errors: list[dict[str, str]]
    ) -> list[EnvironmentInfo] | None:
        """Every server of the tool-servers file in place of the host class."""
        if not is_host(host.file, host.class_name):
            return None
        servers: tuple[ServerEntry, ...] = ()
        if places.environ is not None and places.home is not None:
            path = servers_path(places.environ, places.home)
            try:
                servers = server_entries(path)
            except ValueError as exc:
                errors.append({"file": str(path), "error": str(exc)})
        return [
            dataclasses.replace(host, name=e.name, description=e.description, format=self.name, entry=e.server)
            for e in servers
        ]

    def schema(self, info: EnvironmentInfo, read: ConfigSchema, places: FieldPlaces) -> ConfigSchema:
        source = run_source(places.home, servers_path(places.environ, places.home), info.entry)
        return read.without(SET_BY_SERVER, environment=info.name, run_source=source)

    def runs(self, env: Mapping[str, Any]) -> bool:
        return bool(env.get("mcp_server"))


FORMAT = McpToolsFormat()
