"""The MCP session of each rollout: opened on its first tool call, closed when the rollout ends.

A rollout's tools run in the rollout's own task, so the session (and the stdio server's process) is
entered and left there, on every exit path: answered, cut off, failed or cancelled. Sessions open
at once are bounded. A server declared stateless is one session for the whole environment, owned
by a task of its own and closed with the environment.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcp import ClientSession

from tinker_atropos.mcp_tools.servers_file import ServerSpec
from tinker_atropos.mcp_tools.sessions import CallOutcome, Sandbox, ServerUnavailable, call_tool, open_session


@dataclass(frozen=True)
class SessionSettings:
    spec: ServerSpec
    start_timeout_s: float
    tool_timeout_s: float
    max_result_chars: int
    sandbox: Sandbox
    errlog_dir: Path | None = None


class RolloutSession:
    """One rollout's session, opened lazily inside the rollout's task."""

    def __init__(self, settings: SessionSettings, gate: asyncio.Semaphore, shared: SharedSession | None) -> None:
        self.settings = settings
        self._gate = gate
        self._shared = shared
        self._stack = AsyncExitStack()
        self._session: ClientSession | None = None
        self.failure: str | None = None  # why the server could not be reached (kept for later calls)

    async def _open(self) -> ClientSession:
        if self._shared is not None:
            return await self._shared.session()
        if self._session is None:
            if self.failure is not None:
                raise ServerUnavailable(self.failure)
            await self._gate.acquire()
            self._stack.callback(self._gate.release)
            s = self.settings
            try:
                self._session = await self._stack.enter_async_context(
                    open_session(s.spec, start_timeout_s=s.start_timeout_s, sandbox=s.sandbox, errlog_dir=s.errlog_dir)
                )
            except ServerUnavailable as exc:
                self.failure = str(exc)
                raise
        return self._session

    async def call(self, name: str, arguments: dict[str, Any]) -> CallOutcome:
        s = self.settings
        return await call_tool(
            await self._open(), name, arguments, timeout_s=s.tool_timeout_s, max_chars=s.max_result_chars
        )

    async def aclose(self) -> None:
        await self._stack.aclose()


_CURRENT: contextvars.ContextVar[RolloutSession | None] = contextvars.ContextVar("mcp_rollout_session", default=None)


@asynccontextmanager
async def rollout_session(
    settings: SessionSettings, gate: asyncio.Semaphore, shared: SharedSession | None = None
) -> AsyncIterator[RolloutSession]:
    """The current rollout's session for the length of the block (`current()` finds it)."""
    holder = RolloutSession(settings, gate, shared)
    token = _CURRENT.set(holder)
    try:
        yield holder
    finally:
        _CURRENT.reset(token)
        await holder.aclose()


def current() -> RolloutSession:
    holder = _CURRENT.get()
    if holder is None:
        raise RuntimeError("an MCP tool was called outside a rollout")
    return holder


class SharedSession:
    """A stateless server's one session, owned by a task of its own (anyio scopes stay in one task)."""

    def __init__(self, settings: SessionSettings) -> None:
        self.settings = settings
        self._ready = asyncio.Event()
        self._done = asyncio.Event()
        self._session: ClientSession | None = None
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    async def _own(self) -> None:
        s = self.settings
        try:
            async with open_session(
                s.spec, start_timeout_s=s.start_timeout_s, sandbox=s.sandbox, errlog_dir=s.errlog_dir
            ) as session:
                self._session = session
                self._ready.set()
                await self._done.wait()
        except BaseException as exc:
            self._error = exc
            self._ready.set()
            if not isinstance(exc, Exception):
                raise

    async def session(self) -> ClientSession:
        if self._task is None:
            self._task = asyncio.create_task(self._own())
        await self._ready.wait()
        if self._session is None:
            raise ServerUnavailable(str(self._error))
        return self._session

    async def aclose(self) -> None:
        self._done.set()
        if self._task is not None:
            await self._task
