"""The tool-servers file: Claude Desktop's `mcpServers` JSON shape, or Hermes' own `config.yaml`
(`mcp_servers`, the same fields): users point RL_MCP_TOOL_SERVERS at their client's file.

stdio servers have `command`, `args`, `env` (and optional `cwd`); Streamable HTTP servers a `url`
and optional `headers`. rl-mcp adds `stateless` (one process may serve every rollout); the client's
own settings (Hermes' timeouts, keepalive, sampling, ...) are read past. The server lists these
without importing the MCP SDK (YAML through PyYAML, which the server has).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

ENV_VAR = "RL_MCP_TOOL_SERVERS"
DEFAULT_NAME = "tool-servers.json"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,49}$")
KEYS = ("mcpServers", "mcp_servers")
PROBE_MARKER = "=== rl-mcp tool servers ==="  # probe.py prints its JSON after it; the server reads it there
KNOWN_FIELDS = {
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "stateless",
    "disabled",
    "enabled",
    "type",
    "transport",
}
# the clients' own settings of a server, which rl-mcp has its own fields for (or no use of)
CLIENT_FIELDS = {
    "timeout",
    "connect_timeout",
    "keepalive_interval",
    "idle_timeout_seconds",
    "max_lifetime_seconds",
    "lifecycle",
    "supports_parallel_tool_calls",
    "skip_preflight",
    "sampling",
    "tools",
    "description",
    "autoApprove",
    "alwaysAllow",
}
TRANSPORTS = {"stdio", "http", "streamable_http", "streamable-http", "streamableHttp"}


class ServersFileError(ValueError):
    """The file cannot be read at all (missing keys, bad JSON); one bad server is not this."""


@dataclass(frozen=True)
class ServerSpec:
    """One configured server, as the file says it (secrets in `env`/`headers` are never echoed)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    stateless: bool = False

    @property
    def transport(self) -> Literal["stdio", "http"]:
        return "http" if self.url else "stdio"

    def public(self) -> dict[str, Any]:
        """What a listing shows: the command line or URL, env and header names only."""
        where = {"url": self.url} if self.url else {"command": self.command, "args": list(self.args)}
        return {
            "transport": self.transport,
            **where,
            "env_names": sorted(self.env),
            "header_names": sorted(self.headers),
            "stateless": self.stateless,
        }


def servers_path(environ: Mapping[str, str], home: Path) -> Path:
    """RL_MCP_TOOL_SERVERS when set (e.g. a client's own claude_desktop_config.json), else
    `<RL_MCP_HOME>/tool-servers.json`."""
    named = environ.get(ENV_VAR, "").strip()
    return Path(named).expanduser() if named else home / DEFAULT_NAME


def _strings(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"`{what}` must be an object of strings")
    return dict(value)


def parse_server(name: str, entry: Any) -> ServerSpec:
    """One entry, or ValueError saying what is wrong with it and how to fix it."""
    if not NAME_PATTERN.match(name):
        raise ValueError(f"server name {name!r} is not usable: letters, digits, '_', '.', '-' (at most 50)")
    if not isinstance(entry, dict):
        raise ValueError("the entry must be an object with `command` (stdio) or `url` (Streamable HTTP)")
    unknown = sorted(set(entry) - KNOWN_FIELDS - CLIENT_FIELDS)
    if unknown:
        raise ValueError(f"unknown field(s) {unknown}; known: {sorted(KNOWN_FIELDS)}")
    transport = entry.get("transport") or entry.get("type")
    if transport is not None and transport not in TRANSPORTS:
        raise ValueError(
            f"transport {transport!r} is not served here: stdio (`command`) or Streamable HTTP (`url`); "
            "an SSE-only server needs a Streamable HTTP endpoint"
        )
    command, url = entry.get("command"), entry.get("url")
    if bool(command) == bool(url):
        raise ValueError("give exactly one of `command` (a stdio server) or `url` (Streamable HTTP)")
    args = entry.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError("`args` must be a list of strings")
    if url is not None and not (isinstance(url, str) and re.match(r"^https?://", url)):
        raise ValueError(f"`url` {url!r} must start with http:// or https://")
    if command is not None and not isinstance(command, str):
        raise ValueError("`command` must be a string")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ValueError("`cwd` must be a string")
    return ServerSpec(
        name=name,
        command=command,
        args=tuple(args),
        env=_strings(entry.get("env"), "env"),
        cwd=cwd,
        url=url,
        headers=_strings(entry.get("headers"), "headers"),
        stateless=bool(entry.get("stateless", False)),
    )


@dataclass(frozen=True)
class ServersFile:
    """The file read: usable servers, and each unusable one's error (listed, not dropped)."""

    path: Path
    servers: dict[str, ServerSpec]
    errors: dict[str, str]


YAML_SUFFIXES = (".yaml", ".yml")


def _load(path: Path) -> Any:
    """JSON, or YAML for a `.yaml`/`.yml` file (Hermes' config.yaml)."""
    text = path.read_text()
    if path.suffix not in YAML_SUFFIXES:
        return json.loads(text)
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(str(exc)) from exc


def read_servers(path: Path) -> ServersFile:
    """The servers of `path` (none when it does not exist); ServersFileError when it is unreadable."""
    if not path.exists():
        return ServersFile(path, {}, {})
    try:
        data = _load(path)
    except (OSError, ValueError) as exc:
        kind = "YAML" if path.suffix in YAML_SUFFIXES else "JSON"
        raise ServersFileError(f"tool-servers file {path} is not readable {kind} ({exc}): fix it") from exc
    table = next((data[k] for k in KEYS if isinstance(data, dict) and k in data), None)
    if not isinstance(table, dict):
        raise ServersFileError(
            f"tool-servers file {path} has no `mcpServers` object: write "
            '{"mcpServers": {"time": {"command": "mcp-server-time", "args": []}}}'
        )
    servers: dict[str, ServerSpec] = {}
    errors: dict[str, str] = {}
    for name, entry in table.items():
        if isinstance(entry, dict) and (entry.get("disabled") is True or entry.get("enabled") is False):
            continue
        try:
            servers[name] = parse_server(name, entry)
        except ValueError as exc:
            errors[name] = f"server {name!r} in {path}: {exc}"
    return ServersFile(path, servers, errors)


def find_server(path: Path, name: str) -> ServerSpec:
    """The server called `name`, or ValueError naming the known ones."""
    found = read_servers(path)
    if name in found.errors:
        raise ValueError(found.errors[name])
    if name not in found.servers:
        known = ", ".join(sorted(found.servers)) or "none"
        raise ValueError(f"no tool server {name!r} in {path} (servers there: {known}); add it to `mcpServers`")
    return found.servers[name]
