"""Process plumbing shared by the sandbox backends: spawning with limits, bounded output capture,
and killing everything a sandbox started, even processes that left its process group.

Every sandboxed process carries `RL_MCP_SANDBOX=<sandbox dir>` in its environment. Process groups
are the fast path for cleanup; the marker finds the rest (a `setsid` daemon, the orphans of an
owner that died by SIGKILL) by reading `/proc/<pid>/environ`.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import resource
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MARKER_ENV = "RL_MCP_SANDBOX"
_PR_SET_PDEATHSIG = 1
_CHUNK = 65536
_POLL_S = 0.01
_DRAIN_GRACE_S = 0.3  # how long to keep reading after the shell exits (children may hold the pipe)


@dataclass(frozen=True)
class CommandResult:
    """`exit_code` is None when the sandbox killed the command (timeout or output flood)."""

    exit_code: int | None
    output: str
    timed_out: bool
    truncated: bool


@dataclass(frozen=True)
class Limits:
    """Per-process rlimits (None = inherit). `processes` counts all of the user's processes."""

    cpu_s: int | None
    memory_bytes: int | None
    file_bytes: int | None
    processes: int | None


def child_preexec(limits: Limits) -> Callable[[], None]:
    """The function run in the forked child before exec: die with the parent, apply rlimits."""
    parent = os.getpid()
    libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    pairs = (
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_FSIZE, limits.file_bytes),
        (resource.RLIMIT_NPROC, limits.processes),
    )

    def preexec() -> None:
        if libc is not None:
            # SIGTERM, not SIGKILL: the sandbox shell traps it and kills its whole group.
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(137)
        for which, value in pairs:
            if value is not None:
                _, hard = resource.getrlimit(which)
                value = value if hard == resource.RLIM_INFINITY else min(value, hard)
                resource.setrlimit(which, (value, value))

    return preexec


class Capture:
    """Keeps the first 40% and last 60% of `cap` bytes of a stream (Hermes' head/tail split)."""

    def __init__(self, cap: int) -> None:
        self.head_cap = int(cap * 0.4)
        self.tail_cap = cap - self.head_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > self.tail_cap:
                del self.tail[: len(self.tail) - self.tail_cap]

    @property
    def truncated(self) -> bool:
        return self.total > self.head_cap + self.tail_cap

    def render(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.truncated:
            return head + tail
        omitted = self.total - len(self.head) - len(self.tail)
        return f"{head}\n\n... [OUTPUT TRUNCATED - {omitted} chars omitted out of {self.total} total] ...\n\n{tail}"


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def run_bounded(
    argv: list[str],
    *,
    env: dict[str, str],
    cwd: Path | None,
    timeout_s: float,
    max_output_chars: int,
    max_drain_bytes: int,
    preexec: Callable[[], None],
    on_spawn: Callable[[int], None],
) -> CommandResult:
    """Run `argv` in a new session with stdout+stderr merged, memory bounded whatever it prints.

    Output beyond `max_drain_bytes` (a flood like `yes`) gets the group killed; so does the
    timeout, and so does cancellation of the awaiting task.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=cwd,
        env=env,
        start_new_session=True,
        preexec_fn=preexec,
    )
    on_spawn(proc.pid)
    capture = Capture(max_output_chars)
    flooded = False

    async def pump() -> None:
        nonlocal flooded
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(_CHUNK):
            capture.feed(chunk)
            if capture.total > max_drain_bytes:
                flooded = True
                kill_group(proc.pid)
                return

    reader = asyncio.create_task(pump())
    timed_out = False
    try:
        if not await _exited(proc, timeout_s):
            timed_out = True
            kill_group(proc.pid)
            await _exited(proc, 5.0)
        try:
            await asyncio.wait_for(asyncio.shield(reader), _DRAIN_GRACE_S)
        except TimeoutError:
            pass
    finally:
        reader.cancel()
        if proc.returncode is None:
            kill_group(proc.pid)
    output = capture.render()
    if flooded:
        output += f"\n[Output exceeded {max_drain_bytes} bytes: command killed]"
    killed = timed_out or flooded
    return CommandResult(
        exit_code=None if killed else proc.returncode,
        output=output,
        timed_out=timed_out,
        truncated=capture.truncated,
    )


async def _exited(proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
    """Whether `proc` exits within `timeout_s`. Polls: `proc.wait()` also waits for the pipes to
    close, which a backgrounded child (`server &`) keeps open long after the shell is gone."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while proc.returncode is None:
        if asyncio.get_running_loop().time() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True


async def exec_bytes(
    argv: list[str],
    stdin: bytes | None,
    timeout_s: float,
    *,
    env: dict[str, str] | None = None,
    preexec: Callable[[], None] | None = None,
) -> tuple[int, bytes]:
    """Run a short helper (docker exec, a sandbox's file I/O, probes): exit code and merged output,
    or -1 on timeout."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
        env=env,
        preexec_fn=preexec,
        cwd="/",
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
    except TimeoutError:
        kill_group(proc.pid)
        await proc.wait()
        return -1, b"timed out after %.0fs" % timeout_s
    finally:
        if proc.returncode is None:
            kill_group(proc.pid)
    return proc.returncode or 0, out


def kill_marked(marker: str, passes: int = 5) -> int:
    """SIGKILL every process (of this user) whose environment holds MARKER_ENV=`marker`."""
    needle = f"\0{MARKER_ENV}={marker}\0".encode()
    me, killed = os.getpid(), 0
    for _ in range(passes):  # repeat: a dying tree may still be forking
        found = 0
        for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
            if not entry.name.isdigit() or int(entry.name) == me:
                continue
            try:
                env = (entry / "environ").read_bytes()
            except OSError:
                continue
            if needle in b"\0" + env:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                    found += 1
                except (ProcessLookupError, PermissionError):
                    pass
        killed += found
        if not found:
            break
    return killed
