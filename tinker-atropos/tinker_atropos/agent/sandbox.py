"""Per-rollout sandboxes: where a policy's `terminal` and file tools act, one per rollout.

`local` runs commands as subprocesses of this process in a private directory, with a scrubbed
environment and rlimits: isolation good enough for RL on one's own tasks, not a security boundary
against hostile code (use `docker` for that). `docker` gives every rollout a container.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import secrets
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tinker_atropos.agent.procs import (
    MARKER_ENV,
    CommandResult,
    Limits,
    child_preexec,
    kill_group,
    kill_marked,
    owner_alive,
    process_start_ticks,
    run_bounded,
)

__all__ = [
    "CommandResult",
    "Sandbox",
    "SandboxConfig",
    "SandboxEscape",
    "SandboxExpired",
    "SandboxUnavailable",
    "open_sandbox",
]

logger = logging.getLogger(__name__)

WORKING_BACKENDS = ("local", "docker")
_NEEDS = {
    "modal": "the `modal` package and a Modal token (MODAL_TOKEN_ID / MODAL_TOKEN_SECRET)",
    "daytona": "the `daytona` SDK and a DAYTONA_API_KEY",
    "ssh": "an SSH host, user and key (TERMINAL_SSH_HOST / TERMINAL_SSH_USER / TERMINAL_SSH_KEY)",
    "singularity": "the `apptainer`/`singularity` binary and a SIF image",
}
PREFIX = "rl-mcp-sandbox-"
_DIR_RE = re.compile(re.escape(PREFIX) + r"(\d+)-(\d+)-[0-9a-f]+$")
_SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ")

# Runs every command: restores the cwd and exported variables of the previous command (Hermes'
# terminal keeps them), runs it as a background job so the shell can act on the SIGTERM it gets
# when its owner dies (PDEATHSIG) by killing its whole process group, and saves state on exit.
SHELL_WRAPPER = r"""
trap 'kill -KILL 0' TERM
__rl_state="$RL_MCP_STATE"
{
  cd "$(cat "$__rl_state/cwd" 2>/dev/null || echo "$RL_MCP_WORKDIR")" 2>/dev/null
  [ -f "$__rl_state/env" ] && . "$__rl_state/env" >/dev/null 2>&1
  trap 'pwd > "$__rl_state/cwd"; export -p > "$__rl_state/env"' EXIT
  eval "$1"
} &
wait $!
"""


class SandboxUnavailable(RuntimeError):
    """The requested backend cannot run here; the message says what it needs."""


class SandboxEscape(ValueError):
    """A path resolves outside the sandbox's workdir."""


class SandboxExpired(RuntimeError):
    """The sandbox outlived `lifetime_s` and accepts no more operations."""


@dataclass(frozen=True)
class SandboxConfig:
    """Hermes names in brackets. Output: 16_000 chars kept per command (Hermes keeps 50_000;
    small policies have small contexts), head 40% + tail 60% around a truncation marker."""

    backend: str = "local"  # [terminal_backend]
    timeout_s: float = 120.0  # per command [terminal_timeout]
    lifetime_s: float = (
        3600.0  # from opening; then every operation is refused [terminal_lifetime]
    )
    max_output_chars: int = 16_000
    max_drain_bytes: int = (
        64 * 1024 * 1024
    )  # a command printing more than this is killed
    cpu_time_s: int | None = 600  # RLIMIT_CPU per process
    memory_bytes: int | None = 4 * 1024**3  # RLIMIT_AS per process (docker: --memory)
    file_size_bytes: int | None = 1024**3  # RLIMIT_FSIZE
    max_processes: int | None = (
        4096  # RLIMIT_NPROC counts the user's processes (docker: --pids-limit)
    )
    root: Path | None = None  # parent of local sandbox dirs; None = the system temp dir
    docker_image: str = (
        "nikolaik/python-nodejs:python3.11-nodejs20"  # Hermes' default image
    )

    @property
    def limits(self) -> Limits:
        return Limits(
            self.cpu_time_s, self.memory_bytes, self.file_size_bytes, self.max_processes
        )


class Sandbox(ABC):
    """One rollout's machine: a shell (`run`) and confined file access, refused after lifetime."""

    workdir: Path | PurePosixPath

    def __init__(self, config: SandboxConfig) -> None:
        self.config = config
        self._deadline = time.monotonic() + config.lifetime_s

    def check_alive(self) -> None:
        if time.monotonic() > self._deadline:
            raise SandboxExpired(
                f"sandbox lifetime of {self.config.lifetime_s:g}s (terminal_lifetime) is over: "
                "it accepts no more commands or file operations"
            )

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        """Run `command` with bash in the workdir; cwd and exported variables persist."""
        self.check_alive()
        return await self._run(
            command, self.config.timeout_s if timeout_s is None else timeout_s
        )

    @abstractmethod
    async def _run(self, command: str, timeout_s: float) -> CommandResult: ...

    @abstractmethod
    def resolve(self, path: str) -> Path | PurePosixPath:
        """`path` (relative to the workdir, or absolute) as a path inside the sandbox."""

    @abstractmethod
    async def read_bytes(self, path: str, limit: int) -> bytes:
        """At most `limit` bytes of a regular file (FileNotFoundError / IsADirectoryError)."""

    @abstractmethod
    async def write_bytes(self, path: str, data: bytes) -> bool:
        """Write `data`, creating parent directories; True when some had to be created."""

    @abstractmethod
    async def aclose(self) -> None: ...


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
        self.env = {k: os.environ[k] for k in _SAFE_ENV if k in os.environ}
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
        target = (self.workdir / os.path.expanduser(path)).resolve()
        if target != self.workdir and self.workdir not in target.parents:
            raise SandboxEscape(
                f"path {path!r} resolves outside the sandbox workdir {self.workdir}"
            )
        return target

    async def read_bytes(self, path: str, limit: int) -> bytes:
        self.check_alive()
        target = self.resolve(path)

        def read() -> bytes:
            if target.is_dir():
                raise IsADirectoryError(path)
            if (
                not target.is_file()
            ):  # also refuses FIFOs and devices, which would block
                raise FileNotFoundError(path)
            with target.open("rb") as f:
                return f.read(limit)

        return await asyncio.to_thread(read)

    async def write_bytes(self, path: str, data: bytes) -> bool:
        self.check_alive()
        target = self.resolve(path)
        created = not target.parent.exists()
        target.parent.mkdir(parents=True, exist_ok=True)
        await asyncio.to_thread(target.write_bytes, data)
        return created

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
        m = _DIR_RE.match(entry.name)
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
    if name in _NEEDS:
        raise SandboxUnavailable(
            f"terminal_backend {name!r} is not supported by rl-mcp's sandboxes (it would need "
            f"{_NEEDS[name]}); backends that work: {working}"
        )
    raise SandboxUnavailable(
        f"unknown terminal_backend {name!r}; known: {', '.join((*WORKING_BACKENDS, *_NEEDS))} "
        f"(working: {working})"
    )


@asynccontextmanager
async def open_sandbox(config: SandboxConfig) -> AsyncIterator[Sandbox]:
    """A fresh sandbox for one rollout; on exit its processes are killed and its files removed."""
    check_backend(config.backend)
    sandbox: Sandbox
    if config.backend == "docker":
        from tinker_atropos.agent.docker_sandbox import open_docker

        sandbox = await open_docker(config)
    else:
        root = Path(config.root or tempfile.gettempdir())
        root.mkdir(parents=True, exist_ok=True)
        sweep_stale(root)
        ticks = process_start_ticks(os.getpid()) or 0
        name = f"{PREFIX}{os.getpid()}-{ticks}-{secrets.token_hex(4)}"
        (root / name).mkdir(mode=0o700)
        sandbox = LocalSandbox(config, root / name)
    try:
        yield sandbox
    finally:
        await sandbox.aclose()
