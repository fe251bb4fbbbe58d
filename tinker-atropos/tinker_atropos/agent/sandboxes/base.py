"""What every sandbox backend shares: its config, its interface and its errors."""

from __future__ import annotations

import posixpath
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tinker_atropos.agent.sandboxes.procs import CommandResult, Limits

WORKING_BACKENDS = ("local", "bwrap", "docker")
AUTO = "auto"  # bwrap where its probe succeeds, else local with a warning
BACKEND_NEEDS = {
    "modal": "the `modal` package and a Modal token (MODAL_TOKEN_ID / MODAL_TOKEN_SECRET)",
    "daytona": "the `daytona` SDK and a DAYTONA_API_KEY",
    "ssh": "an SSH host, user and key (TERMINAL_SSH_HOST / TERMINAL_SSH_USER / TERMINAL_SSH_KEY)",
    "singularity": "the `apptainer`/`singularity` binary and a SIF image",
}
PREFIX = "rl-mcp-sandbox-"
SANDBOX_DIR_RE = re.compile(re.escape(PREFIX) + r"(\d+)-(\d+)-[0-9a-f]+$")
SAFE_ENV = ("PATH", "LANG", "LC_ALL", "TZ")
WORKSPACE = "/workspace"  # where Hermes' policies look for their files: the rollout's directory

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


# File I/O run inside a sandbox (bwrap, docker): the sandbox's own view of the files is all it can reach
READ_SCRIPT = 'if [ -d "$1" ]; then exit 21; fi; [ -f "$1" ] || exit 2; head -c "$2" -- "$1"'
WRITE_SCRIPT = 'd=$(dirname "$1"); c=0; [ -d "$d" ] || { mkdir -p "$d" && c=1; }; cat > "$1" && exit $((10 + c))'
Exec = Callable[..., Awaitable[tuple[int, bytes]]]  # (script, *args, stdin=bytes | None) -> (code, output)


async def read_inside(run: Exec, target: str, limit: int, shown: str) -> bytes:
    """At most `limit` bytes of `target`, read by READ_SCRIPT inside the sandbox."""
    code, out = await run(READ_SCRIPT, target, str(limit))
    if code == 21:
        raise IsADirectoryError(shown)
    if code != 0:
        raise FileNotFoundError(shown)
    return out


async def write_inside(run: Exec, target: str, data: bytes, shown: str) -> bool:
    """Write `target` with WRITE_SCRIPT inside the sandbox; True when directories were created."""
    code, out = await run(WRITE_SCRIPT, target, stdin=data)
    if code not in (10, 11):
        raise OSError(f"cannot write {shown}: {out.decode('utf-8', 'replace').strip()}")
    return code == 11


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
    lifetime_s: float = 3600.0  # from opening; then every operation is refused [terminal_lifetime]
    max_output_chars: int = 16_000
    max_drain_bytes: int = 64 * 1024 * 1024  # a command printing more than this is killed
    cpu_time_s: int | None = 600  # RLIMIT_CPU per process
    memory_bytes: int | None = 4 * 1024**3  # RLIMIT_AS per process (docker: --memory)
    file_size_bytes: int | None = 1024**3  # RLIMIT_FSIZE
    max_processes: int | None = 4096  # RLIMIT_NPROC counts the user's processes (docker: --pids-limit)
    max_disk_bytes: int | None = 2 * 1024**3  # the rollout directory's size; over it, the command is killed
    root: Path | None = None  # parent of local sandbox dirs; None = the system temp dir
    ro_paths: tuple[str, ...] = ()  # bwrap: host paths the policy may read, beyond the system's
    network: bool = False  # bwrap: the host's network (else loopback of its own only)
    docker_image: str = "nikolaik/python-nodejs:python3.11-nodejs20"  # Hermes' default image

    @property
    def limits(self) -> Limits:
        return Limits(self.cpu_time_s, self.memory_bytes, self.file_size_bytes, self.max_processes)


def shell_path(path: str, home: str, cwd: str) -> str:
    """`path` as the rollout's shell would name it before following links: `~` and `/workspace`
    are its home (the rollout's directory), a relative path starts at its current directory."""
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    elif path.startswith("~"):
        raise SandboxEscape(f"path {path!r} names another user's home, outside the sandbox")
    joined = posixpath.join(cwd, path)  # a cwd under /workspace too (the bwrap shell's own name)
    if joined == WORKSPACE or joined.startswith(WORKSPACE + "/"):
        joined = home + joined[len(WORKSPACE) :]
    return joined


class Sandbox(ABC):
    """One rollout's machine: a shell (`run`) and confined file access, refused after lifetime."""

    workdir: Path | PurePosixPath  # the rollout's directory, as this process reaches it
    shell_home: str  # the same directory as the sandbox's shell names it (bwrap, docker: /workspace)

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
        return await self._run(command, self.config.timeout_s if timeout_s is None else timeout_s)

    @abstractmethod
    async def _run(self, command: str, timeout_s: float) -> CommandResult: ...

    def shell_name(self, path: str) -> str:
        """`path` resolved (see `resolve`), as the sandbox's shell names it."""
        rel = PurePosixPath(self.resolve(path)).relative_to(PurePosixPath(self.workdir))
        return posixpath.normpath(posixpath.join(self.shell_home, str(rel)))

    @abstractmethod
    def resolve(self, path: str) -> Path | PurePosixPath:
        """`path` as the sandbox's shell resolves it (`shell_path`, then its symlinks), refused with
        SandboxEscape where that lands outside the rollout's directory."""

    @abstractmethod
    async def read_bytes(self, path: str, limit: int) -> bytes:
        """At most `limit` bytes of a regular file (FileNotFoundError / IsADirectoryError)."""

    @abstractmethod
    async def write_bytes(self, path: str, data: bytes) -> bool:
        """Write `data`, creating parent directories; True when some had to be created."""

    @abstractmethod
    async def aclose(self) -> None: ...
