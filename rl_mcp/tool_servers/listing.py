"""Each tool server's tools, read through a real MCP session in a child process.

`python -m tinker_atropos.mcp_tools.probe` starts every server (initialize + tools/list, bounded by
RL_MCP_TOOL_SERVER_TIMEOUT seconds, 20 by default) and prints what it found: the server process
never hangs on a tool server and never speaks MCP to it itself. Answers are kept while the file is
unchanged, for `CACHE_S`; a server that failed is asked again at the next listing.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from rl_mcp.errors import UserError
from rl_mcp.settings import Settings, without_secrets
from rl_mcp.tool_servers.files import servers_file
from tinker_atropos.mcp_tools.servers_file import PROBE_MARKER, ServersFileError, ServerSpec, servers_path
from tinker_atropos.mcp_tools.tool_policy import Allowed, ToolInfo, allowed_tools

TIMEOUT_VAR = "RL_MCP_TOOL_SERVER_TIMEOUT"
CACHE_S = 300.0


class ToolServerError(UserError):
    """A tool server that is not configured, or whose tools cannot be read (the message says why)."""


@dataclass(frozen=True)
class ServerTools:
    """One server as listed: its tools and default allow-list, or the error that kept it from starting."""

    server: str
    spec: ServerSpec | None
    tools: tuple[ToolInfo, ...] = ()
    error: str | None = None

    def allowed(self, requested: list[str] | None = None) -> Allowed:
        return allowed_tools(self.tools, requested, self.server)

    def usable(self) -> ServerTools:
        """Itself, or ToolServerError naming why its tools are not known."""
        if self.error is not None:
            raise ToolServerError(self.error)
        return self


class ToolServers:
    """The servers of the tool-servers file, their tools cached by the file's state."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.path = servers_path(settings.environ, settings.home)
        self._cache: dict[str, tuple[float, tuple[int, int], ServerTools]] = {}
        self._lock = anyio.Lock()

    @property
    def timeout_s(self) -> float:
        try:
            return max(1.0, float(self.settings.environ.get(TIMEOUT_VAR, "20")))
        except ValueError:
            return 20.0

    def _stamp(self) -> tuple[int, int]:
        try:
            st = self.path.stat()
        except OSError:
            return (0, -1)
        return (st.st_mtime_ns, st.st_size)

    async def listing(self) -> dict[str, ServerTools]:
        """Every configured server (an unusable one with its error); ToolServerError for an unreadable file."""
        try:
            found = servers_file(self.path)
        except ServersFileError as exc:
            raise ToolServerError(str(exc)) from exc
        out = {name: ServerTools(name, None, error=err) for name, err in found.errors.items()}
        async with self._lock:  # one probe at a time: each starts every server it asks
            stamp, now = self._stamp(), time.monotonic()
            fresh = {
                n: hit[2]
                for n in found.servers
                if (hit := self._cache.get(n)) and hit[1] == stamp and now - hit[0] < CACHE_S and hit[2].error is None
            }
            missing = [n for n in found.servers if n not in fresh]
            probed = await self._probe(missing) if missing else {}
            for name in missing:
                answer = probed.get(name) or {"error": f"server {name!r}: the probe gave no answer"}
                tools = tuple(ToolInfo.from_json(t) for t in answer.get("tools") or [])
                fresh[name] = ServerTools(name, found.servers[name], tools, answer.get("error"))
                self._cache[name] = (now, stamp, fresh[name])
        out.update(fresh)
        return dict(sorted(out.items()))

    async def server(self, name: str) -> ServerTools:
        """One server's tools, or ToolServerError naming the configured ones."""
        listed = await self.listing()
        if name not in listed:
            known = ", ".join(listed) or "none"
            raise ToolServerError(
                f"no tool server {name!r} in {self.path} (servers there: {known}); add it under `mcpServers`"
            )
        return listed[name].usable()

    async def _probe(self, names: list[str]) -> dict[str, Any]:
        # the training runtime where it is made (bubblewrap's binary for sandboxed servers comes with it),
        # else the server's own Python, which has every module the probe imports
        python = self.settings.python if Path(self.settings.python).exists() else sys.executable
        cmd = [
            python,
            "-m",
            "tinker_atropos.mcp_tools.probe",
            str(self.path),
            f"{self.timeout_s:g}",
            *names,
        ]
        env = without_secrets(self.settings.environ)  # the probe needs no key; servers get their own env only
        limit = 2 * self.timeout_s + 15  # its own per-server bounds come first: it closes what it started
        try:
            with anyio.fail_after(limit):
                proc = await anyio.run_process(
                    cmd, env=env, check=False, cwd=str(self.settings.home), stdin=subprocess.DEVNULL
                )
        except TimeoutError:
            return {n: {"error": f"server {n!r}: listing its tools took over {limit:g} s"} for n in names}
        stdout = proc.stdout.decode(errors="replace")
        marker = stdout.rfind(PROBE_MARKER)
        if marker < 0:
            tail = "\n".join(proc.stderr.decode(errors="replace").strip().splitlines()[-10:])
            return {n: {"error": f"listing the tools failed (exit {proc.returncode}): {tail}"} for n in names}
        answer: dict[str, Any] = json.loads(stdout[marker + len(PROBE_MARKER) :])
        return answer
