"""The user's MCP tool servers as environments `mcp:<name>`, read from the tool-servers file.

Each server is a run of the bundled `McpToolsEnv` with `mcp_server` set; its config fields are that
environment's, less what the server sets per run (`SET_BY_SERVER`). Nothing is started here: the
listing's tools come from `rl_mcp/tool_servers/listing.py`, in a child process.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rl_mcp.settings import BUNDLED_ENV_DIR
from rl_mcp.tool_servers.files import environment_name, servers_file, tasks_path

ENV_FILE = BUNDLED_ENV_DIR / "mcp_tools_env.py"
ENV_CLASS = "McpToolsEnv"
SET_BY_SERVER = ("mcp_server", "tool_servers_file", "default_tasks_file")


@dataclass(frozen=True)
class ServerEntry:
    name: str  # mcp:<server>
    server: str
    description: str


def is_host(file: Path, class_name: str) -> bool:
    """Whether this class is the bundled McpToolsEnv (listed through its servers, not by itself)."""
    return class_name == ENV_CLASS and file.resolve() == ENV_FILE.resolve()


def server_entries(path: Path) -> tuple[ServerEntry, ...]:
    """Every server of the file, a bad entry included (its error is its description: listed, not dropped)."""
    found = servers_file(path)
    entries = [
        ServerEntry(
            environment_name(name), name, f"train a model to use the MCP tool server {name!r} ({spec.transport})"
        )
        for name, spec in found.servers.items()
    ]
    entries += [ServerEntry(environment_name(name), name, f"unusable: {error}") for name, error in found.errors.items()]
    return tuple(sorted(entries, key=lambda e: e.name))


def run_source(home: Path, servers: Path, server: str) -> dict[str, str]:
    """What a run of `mcp:<server>` is told by the server: which server, in which file, its tasks' default."""
    return {
        "mcp_server": server,
        "tool_servers_file": str(servers),
        "default_tasks_file": str(tasks_path(home, server)),
    }
