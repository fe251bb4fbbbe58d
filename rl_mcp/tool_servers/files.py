"""The user's tool-servers file as read now, the environment name of each server and where the tasks
written for one are kept."""

from __future__ import annotations

import functools
from pathlib import Path

from tinker_atropos.mcp_tools.servers_file import ServersFile, read_servers

PREFIX = "mcp:"
TASKS_DIR = "mcp-tasks"


def environment_name(server: str) -> str:
    """The environment a server is listed as."""
    return f"{PREFIX}{server}"


def names_a_server(environment: str) -> bool:
    """Whether an environment's name is a tool server's."""
    return environment.startswith(PREFIX)


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


def tasks_path(home: Path, server: str) -> Path:
    """Where the tasks written for `server` are saved (the user reads and edits them there)."""
    return home / TASKS_DIR / f"{server}.jsonl"
