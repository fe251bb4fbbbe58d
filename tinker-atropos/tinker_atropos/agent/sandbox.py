"""Per-rollout sandboxes: where a policy's `terminal` and file tools act, one per rollout.

`local` runs commands as subprocesses of this process in a private directory, with a scrubbed
environment and rlimits: isolation good enough for RL on one's own tasks, not a security boundary
against hostile code (use `docker` for that). `docker` gives every rollout a container.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from tinker_atropos.agent import confined_fs
from tinker_atropos.agent.procs import (
    MARKER_ENV,
    CommandResult,
    child_preexec,
    kill_group,
    kill_marked,
    owner_alive,
    process_start_ticks,
    run_bounded,
)
from tinker_atropos.agent.sandbox_base import (
    BACKEND_NEEDS,
    PREFIX,
    SAFE_ENV,
    SANDBOX_DIR_RE,
    SHELL_WRAPPER,
    WORKING_BACKENDS,
    Sandbox,
    SandboxConfig,
    SandboxEscape,
    SandboxExpired,
    SandboxUnavailable,
    shell_path,
)

__all__ = [
    "CommandResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxEscape",
    "SandboxExpired",
    "SandboxUnavailable",
    "create_sandbox",
    "open_sandbox",
]

logger = logging.getLogger(__name__)


class LocalSandbox(Sandbox):
    def __init__(self, config: SandboxConfig, root: Path) -> None:
        super().__init__(config)
        self.root = root
        self.workdir = (root / "work").resolve()
        self._state = root / "state"
        self._pgids: set[int] = set()
        self._preexec = child_preexec(config.limits)
        for d in (self.workdir, self._state, self.workdir / ".tmp"):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {k: os.environ[k] for k in SAFE_ENV if k in os.environ}
        self.env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        self.env.setdefault("LANG", "C.UTF-8")
        self.env |= {
            "HOME": str(self.workdir),
            "TMPDIR": str(self.workdir / ".tmp"),
            "TERM": "dumb",
            MARKER_ENV: str(root),
            "RL_MCP_STATE": str(self._state),
            "RL_MCP_WORKDIR": str(self.workdir),
        }

    async def _run(self, command: str, timeout_s: float) -> CommandResult:
        return await run_bounded(
            ["bash", "-c", SHELL_WRAPPER, "bash", command],
            env=self.env,
            cwd=self.workdir,
            timeout_s=timeout_s,
            max_output_chars=self.config.max_output_chars,
            max_drain_bytes=self.config.max_drain_bytes,
            preexec=self._preexec,
            on_spawn=self._pgids.add,
        )

    def resolve(self, path: str) -> Path:
        target = Path(os.path.realpath(shell_path(path, str(self.workdir), self._shell_cwd())))
        if target != self.workdir and self.workdir not in target.parents:
            raise SandboxEscape(f"path {path!r} resolves outside the sandbox workdir {self.workdir}")
        return target

    def _shell_cwd(self) -> str:
        """The directory the shell's last command ended in (relative paths start there)."""
        try:
            return (self._state / "cwd").read_text().strip() or str(self.workdir)
        except OSError:
            return str(self.workdir)

    async def read_bytes(self, path: str, limit: int) -> bytes:
        self.check_alive()
        target = self.resolve(path)
        return await asyncio.to_thread(confined_fs.read, self.workdir, target, limit, path)

    async def write_bytes(self, path: str, data: bytes) -> bool:
        self.check_alive()
        target = self.resolve(path)
        return await asyncio.to_thread(confined_fs.write, self.workdir, target, data, path)

    async def aclose(self) -> None:
        for pgid in self._pgids:
            kill_group(pgid)
        kill_marked(str(self.root))
        _remove_tree(self.root)


def _remove_tree(path: Path) -> None:
    """rmtree that also removes what the sandbox made read-only (chmod -w dirs)."""
    for dirpath, dirnames, _ in os.walk(path):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                os.chmod(p, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def sweep_stale(root: Path) -> int:
    """Remove sandbox dirs (and their processes) whose owner process is gone; returns how many."""
    swept = 0
    for entry in root.glob(PREFIX + "*") if root.is_dir() else ():
        m = SANDBOX_DIR_RE.match(entry.name)
        if m and entry.is_dir() and not owner_alive(int(m.group(1)), int(m.group(2))):
            kill_marked(str(entry))
            _remove_tree(entry)
            swept += 1
    if swept:
        logger.info("swept %d stale sandbox dir(s) under %s", swept, root)
    return swept


def check_backend(name: str) -> None:
    """Raise SandboxUnavailable for backends this project cannot run, saying what they need."""
    if name in WORKING_BACKENDS:
        return
    working = ", ".join(WORKING_BACKENDS)
    if name in BACKEND_NEEDS:
        raise SandboxUnavailable(
            f"terminal_backend {name!r} is not supported by rl-mcp's sandboxes (it would need "
            f"{BACKEND_NEEDS[name]}); backends that work: {working}"
        )
    raise SandboxUnavailable(
        f"unknown terminal_backend {name!r}; known: {', '.join((*WORKING_BACKENDS, *BACKEND_NEEDS))} "
        f"(working: {working})"
    )


async def create_sandbox(config: SandboxConfig) -> Sandbox:
    """A fresh sandbox for one rollout; its owner calls `aclose()` (or uses `open_sandbox`)."""
    check_backend(config.backend)
    if config.backend == "docker":
        from tinker_atropos.agent.docker_sandbox import open_docker

        return await open_docker(config)
    root = Path(config.root or tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    sweep_stale(root)
    ticks = process_start_ticks(os.getpid()) or 0
    name = f"{PREFIX}{os.getpid()}-{ticks}-{secrets.token_hex(4)}"
    (root / name).mkdir(mode=0o700)
    return LocalSandbox(config, root / name)


@asynccontextmanager
async def open_sandbox(config: SandboxConfig) -> AsyncIterator[Sandbox]:
    """A fresh sandbox for one rollout; on exit its processes are killed and its files removed."""
    sandbox = await create_sandbox(config)
    try:
        yield sandbox
    finally:
        await sandbox.aclose()
