"""The user's MCP tool servers as environments `mcp:<name>`, read from the tool-servers file.

Each server is a run of the bundled `McpToolsEnv` with `mcp_server` set; its config fields are that
environment's, less what the server sets per run (`SET_BY_SERVER`). Nothing is started here: the
listing's tools come from `rl_mcp/tool_servers/listing.py`, in a child process.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from rl_mcp.settings import BUNDLED_ENV_DIR
from tinker_atropos.mcp_tools.servers_file import ServersFile, read_servers

PREFIX = "mcp:"
ENV_FILE = BUNDLED_ENV_DIR / "mcp_tools_env.py"
ENV_CLASS = "McpToolsEnv"
SET_BY_SERVER = ("mcp_server", "tool_servers_file", "default_tasks_file")
TASKS_DIR = "mcp-tasks"


@dataclass(frozen=True)
class ServerEntry:
    name: str  # mcp:<server>
    server: str
    description: str


def is_host(file: Path, class_name: str) -> bool:
    """Whether this class is the bundled McpToolsEnv (listed through its servers, not by itself)."""
    return class_name == ENV_CLASS and file.resolve() == ENV_FILE.resolve()


def servers_file(path: Path) -> ServersFile:
    """The file as read now (cached while its mtime and size stay); ServersFileError when unreadable."""
    try:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = (0, -1)
    return _read(path, stamp)


@functools.lru_cache(maxsize=8)
def _read(path: Path, stamp: tuple[int, int]) -> ServersFile:
    return read_servers(path)


def server_entries(path: Path) -> tuple[ServerEntry, ...]:
    """Every server of the file, a bad entry included (its error is its description: listed, not dropped)."""
    found = servers_file(path)
    entries = [
        ServerEntry(f"{PREFIX}{name}", name, f"train a model to use the MCP tool server {name!r} ({spec.transport})")
        for name, spec in found.servers.items()
    ]
    entries += [ServerEntry(f"{PREFIX}{name}", name, f"unusable: {error}") for name, error in found.errors.items()]
    return tuple(sorted(entries, key=lambda e: e.name))


def tasks_path(home: Path, server: str) -> Path:
    """Where the tasks written for `server` are saved (the user reads and edits them there)."""
    return home / TASKS_DIR / f"{server}.jsonl"


def run_source(home: Path, servers: Path, server: str) -> dict[str, str]:
    """What a run of `mcp:<server>` is told by the server: which server, in which file, its tasks' default."""
    return {
        "mcp_server": server,
        "tool_servers_file": str(servers),
        "default_tasks_file": str(tasks_path(home, server)),
    }
