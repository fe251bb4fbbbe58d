"""Per-rollout sandboxes: where a policy's `terminal` and file tools act, one per rollout.

Backends: `local` (subprocesses in a private directory: no isolation), `bwrap` (bubblewrap: the
host read-only, no network, no host HOME, its own PID namespace), `docker` (a container), and
`auto` (bwrap where it runs, else local with a warning saying what is missing).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace

from tinker_atropos.agent.sandboxes.base import (
    AUTO,
    BACKEND_NEEDS,
    WORKING_BACKENDS,
    Sandbox,
    SandboxConfig,
    SandboxEscape,
    SandboxExpired,
    SandboxUnavailable,
)
from tinker_atropos.agent.sandboxes.procs import CommandResult
from tinker_atropos.run_files import WARNING_MARK

__all__ = [
    "CommandResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxEscape",
    "SandboxExpired",
    "SandboxUnavailable",
    "check_backend",
    "create_sandbox",
    "open_sandbox",
    "resolve_backend",
]

logger = logging.getLogger(__name__)
_warned: set[str] = set()


def check_backend(name: str) -> None:
    """Raise SandboxUnavailable for backends this project cannot run, saying what they need."""
    if name in (AUTO, *WORKING_BACKENDS):
        return
    working = ", ".join((AUTO, *WORKING_BACKENDS))
    if name in BACKEND_NEEDS:
        raise SandboxUnavailable(
            f"terminal_backend {name!r} is not supported by rl-mcp's sandboxes (it would need "
            f"{BACKEND_NEEDS[name]}); backends that work: {working}"
        )
    raise SandboxUnavailable(
        f"unknown terminal_backend {name!r}; known: {', '.join((AUTO, *WORKING_BACKENDS, *BACKEND_NEEDS))} "
        f"(working: {working})"
    )


def resolve_backend(name: str) -> tuple[str, str | None]:
    """The backend `name` runs on, and for `auto` on local why bwrap was not picked."""
    check_backend(name)
    if name != AUTO:
        return name, None
    from tinker_atropos.agent.sandboxes.bwrap import probe

    missing = probe()
    if missing is None:
        return "bwrap", None
    warning = (
        f"terminal_backend auto: using local, which does NOT isolate the policy's commands from this "
        f"machine (its files, network and processes), because {missing}"
    )
    if warning not in _warned:
        _warned.add(warning)
        logger.warning("%s %s", WARNING_MARK, warning)
    return "local", warning


async def create_sandbox(config: SandboxConfig) -> Sandbox:
    """A fresh sandbox for one rollout; its owner calls `aclose()` (or uses `open_sandbox`)."""
    backend, _ = resolve_backend(config.backend)
    config = replace(config, backend=backend)
    if backend == "docker":
        from tinker_atropos.agent.sandboxes.docker import open_docker

        return await open_docker(config)
    from tinker_atropos.agent.sandboxes.local import LocalSandbox, make_sandbox_dir

    if backend == "bwrap":
        from tinker_atropos.agent.sandboxes.bwrap import BwrapSandbox

        return BwrapSandbox(config, make_sandbox_dir(config))
    return LocalSandbox(config, make_sandbox_dir(config))


@asynccontextmanager
async def open_sandbox(config: SandboxConfig) -> AsyncIterator[Sandbox]:
    """A fresh sandbox for one rollout; on exit its processes are killed and its files removed."""
    sandbox = await create_sandbox(config)
    try:
        yield sandbox
    finally:
        await sandbox.aclose()
