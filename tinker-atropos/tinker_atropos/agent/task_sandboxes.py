"""The sandboxes of live rollouts, found by task id, as Hermes' tools find theirs.

Hermes code names a rollout's machine only by its `task_id` (`HermesAgentLoop(task_id=...)`,
`ToolContext(task_id)`, `ctx.cleanup()`), so the sandbox lives here: opened when a task first
uses a tool (or when the base env opens it for a rollout), closed by `close(task_id)`. The
process-wide settings (sandbox config and `tool_pool_size`) come from the environment's config,
as Hermes' base env sets them for its tools at start.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from tinker_atropos.agent.sandboxes import Sandbox, SandboxConfig, create_sandbox

_lock = threading.Lock()  # reward code reaches the registry from helper threads
_sandboxes: dict[str, Sandbox] = {}
_opening: dict[str, threading.Event] = {}


@dataclass
class _Settings:
    config: SandboxConfig = field(default_factory=SandboxConfig)
    # the tool calls running at once across all rollouts (Hermes' tool_pool_size, default 128)
    tool_slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(128))


settings = _Settings()


def configure(config: SandboxConfig, tool_pool_size: int) -> None:
    """The sandbox every later task gets, and how many tool calls may run at once."""
    settings.config = config
    settings.tool_slots = asyncio.Semaphore(tool_pool_size)


def find(task_id: str) -> Sandbox | None:
    with _lock:
        return _sandboxes.get(task_id)


async def get(task_id: str) -> Sandbox:
    """The task's sandbox, opened on first use (one per task, whichever thread asks first)."""
    while True:
        with _lock:
            if task_id in _sandboxes:
                return _sandboxes[task_id]
            waiting = _opening.get(task_id)
            if waiting is None:
                _opening[task_id] = threading.Event()
        if waiting is None:
            break
        await asyncio.to_thread(waiting.wait)
    try:
        sandbox = await create_sandbox(settings.config)
        with _lock:
            _sandboxes[task_id] = sandbox
        return sandbox
    finally:
        with _lock:
            _opening.pop(task_id).set()


async def close(task_id: str) -> None:
    """Kill the task's processes and remove its files; nothing happens for an unknown task."""
    with _lock:
        sandbox = _sandboxes.pop(task_id, None)
    if sandbox is not None:
        await sandbox.aclose()


@asynccontextmanager
async def task_sandbox(task_id: str) -> AsyncIterator[Sandbox]:
    """The task's sandbox for the length of a rollout, closed at the end whatever happened."""
    try:
        yield await get(task_id)
    finally:
        await close(task_id)
