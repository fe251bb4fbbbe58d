"""Supervised child processes: spawn, readiness to a deadline, shielded stop, re-adopt.

Used by runs (run-api, trainer, environment) and by rl_test_inference (inference server,
`process`, model builds).

Each child runs in its own session (so its own process group): a signal to the group reaches
everything it forked, a Ctrl-C or hang-up of the server reaches none of it, and the child
outlives the server unless told otherwise. A pid alone is not an identity (pids are recycled),
so every record pairs it with the process start time psutil reports.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import httpx
import psutil

from rl_mcp import warm_start
from rl_mcp.errors import UserError
from rl_mcp.tmpdirs import child_tmpdir, remove_tree
from tinker_atropos.http_tls import shared_tls

_CREATE_TIME_TOLERANCE_S = 0.05
# how long a SIGKILLed tree may take to go before `stop` warns that it could not stop it
KILL_WAIT_S = 5.0
log = logging.getLogger(__name__)


class StageError(UserError):
    """A start stage failed: which process, its exit code if it exited, and why."""

    def __init__(self, stage: str, message: str, exit_code: int | None = None, process: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage
        self.exit_code = exit_code
        self.process = process or stage  # the process whose exit or silence failed the stage


@dataclass
class Child:
    """One supervised process: our own child (`popen`), forked by a warm template (`warm`), or
    adopted from an earlier server (neither)."""

    name: str
    pid: int
    create_time: float
    log_path: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    warm: warm_start.WarmChild | None = field(default=None, repr=False)
    _exit_code: int | None = None

    def poll(self) -> int | None:
        """Exit code once exited (our own child or a template's), -1 for one that is gone with
        nobody to tell its code (adopted, or its template gone), else None."""
        if self._exit_code is not None:
            return self._exit_code
        if self.popen is not None:
            self._exit_code = self.popen.poll()
            return self._exit_code
        if self.warm is not None and not self.warm.lost:
            self._exit_code = self.warm.poll()
            if not self.warm.lost:
                return self._exit_code
        if not same_process_alive(self.pid, self.create_time):
            self._exit_code = -1  # not our child: the real code is unknowable, the files tell the rest
        return self._exit_code

    @property
    def running(self) -> bool:
        return self.poll() is None

    def descendants(self) -> list[psutil.Process]:
        """The live process tree under this child (empty once it is gone)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > _CREATE_TIME_TOLERANCE_S:
                return []
            return proc.children(recursive=True)
        except psutil.Error:
            return []


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
) -> Child:
    """Start `argv` in a new session with stdout+stderr appended to `log_path`: forked from a warm
    template where one serves it (`rl_mcp/warm_start/`), else started cold.

    Secrets go in `env`, never in `argv` (argv is world-readable in /proc and lands in logs).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return _start(name, argv, env, cwd, log.fileno(), log.fileno(), log_path)


def _start(
    name: str, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None, stdout: int, stderr: int, log_path: Path
) -> Child:
    warm = warm_start.fork(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr)
    if warm is not None:
        return Child(name=name, pid=warm.pid, create_time=_create_time(warm.pid), log_path=log_path, warm=warm)
    popen = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
        close_fds=True,
    )
    return Child(name=name, pid=popen.pid, create_time=_create_time(popen.pid), log_path=log_path, popen=popen)


async def run_captured(
    name: str, argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None = None, poll_s: float = 0.02
) -> tuple[int | None, bytes, bytes]:
    """Run `argv` to its end (spawned as `spawn` does) and return its exit code, stdout and stderr.
    Cancelled (a caller's timeout), it is stopped first, whatever it started with it."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = _start(name, argv, env, cwd, out.fileno(), err.fileno(), Path(os.devnull))
        try:
            await wait_exit(child, math.inf, poll_s=poll_s)
        finally:
            with anyio.CancelScope(shield=True):
                await stop(child, grace_s=2.0)
        out.seek(0)
        err.seek(0)
        return child.poll(), out.read(), err.read()


def _create_time(pid: int) -> float:
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return time.time()  # exited already; poll() reports its code


def same_process_alive(pid: int, create_time: float) -> bool:
    """True when `pid` is alive, not a zombie, and is the process that started at `create_time`."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > _CREATE_TIME_TOLERANCE_S:
            return False
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def adopt(name: str, pid: int, create_time: float, log_path: Path) -> Child | None:
    """Supervise a process started by an earlier server lifetime, if it is still that process."""
    if not same_process_alive(pid, create_time):
        return None
    return Child(name=name, pid=pid, create_time=create_time, log_path=log_path)


async def wait_ready(
    stage: str,
    child: Child,
    check: Callable[[], Awaitable[bool]],
    *,
    timeout_s: float,
    interval_s: float = 0.1,
) -> float:
    """Poll `check` until it is true; fail fast if `child` exits, fail at `timeout_s`.

    Returns the seconds it took. Never a blind sleep: each poll is a real probe.
    """
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        code = child.poll()
        if code is not None:
            raise StageError(stage, f"{child.name} exited with code {code} before it was ready", code, child.name)
        if await check():
            return time.monotonic() - started
        if time.monotonic() >= deadline:
            raise StageError(stage, f"{child.name} was not ready after {timeout_s:.0f} s")
        await anyio.sleep(interval_s)


def _signal_tree(child: Child, procs: list[psutil.Process], sig: signal.Signals) -> None:
    try:
        os.killpg(child.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for proc in procs:  # descendants that left the group (setsid) still belong to the run
        try:
            proc.send_signal(sig)
        except psutil.Error:
            pass


def _group_alive(pgid: int) -> bool:
    """Any non-zombie process left in the group (zombies wait for a reaper, they run nothing)."""
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(proc.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


async def stop(child: Child, *, grace_s: float = 10.0, poll_s: float = 0.1) -> int | None:
    """SIGTERM to the child's group and tree, SIGKILL whatever is left after `grace_s`.

    Returns the child's exit code (None if unknowable). Afterwards nothing of the tree is alive.
    """
    tree = child.descendants()
    if child.running or tree or _group_alive(child.pid):
        _signal_tree(child, tree, signal.SIGTERM)
        left = await _wait_gone(child, tree, grace_s, poll_s)
        if left is not None:
            _signal_tree(child, left, signal.SIGKILL)
            if await _wait_gone(child, left, KILL_WAIT_S, poll_s) is not None:  # e.g. stuck in the kernel (state D)
                log.warning("could not stop %s (pid %d, log %s) with SIGKILL", child.name, child.pid, child.log_path)
    return child.poll()


async def _wait_gone(
    child: Child, tree: list[psutil.Process], timeout_s: float, poll_s: float
) -> list[psutil.Process] | None:
    """None once the child, its group and `tree` are all gone; else, after `timeout_s`, the part of
    `tree` still alive. A descendant in a session of its own is outside the group: SIGKILLed, it may
    still run for a moment after the group is gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        child.poll()
        tree = [p for p in tree if _alive(p)]
        if not child.running and not tree and not _group_alive(child.pid):
            return None
        if time.monotonic() >= deadline:
            return tree
        await anyio.sleep(poll_s)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


async def wait_exit(child: Child, deadline: float, *, poll_s: float = 0.2) -> int | None:
    """The child's exit code once it exits, or None when `deadline` (monotonic) comes first."""
    while child.running and time.monotonic() < deadline:
        await anyio.sleep(poll_s)
    return child.poll()


@asynccontextmanager
async def supervised(
    name: str,
    argv: Sequence[str],
    *,
    log_path: Path,
    env: Mapping[str, str],
    cwd: Path | None = None,
    ready: Callable[[], Awaitable[bool]] | None = None,
    ready_timeout_s: float = 60.0,
    stop_grace_s: float = 5.0,
) -> AsyncIterator[Child]:
    """A child that lives exactly as long as the block: ready (when `ready` is given) on entry,
    stopped on exit, even when the block is cancelled; then its own TMPDIR is removed."""
    with child_tmpdir(env) as child_env:
        child = spawn(name, argv, log_path=log_path, env=child_env, cwd=cwd)
        _open_blocks[child.pid] = (child, Path(child_env["TMPDIR"]))
        try:
            if ready is not None:
                await wait_ready(name, child, ready, timeout_s=ready_timeout_s)
            yield child
        finally:
            with anyio.CancelScope(shield=True):
                await stop(child, grace_s=stop_grace_s)
            _open_blocks.pop(child.pid, None)


# The `supervised` blocks open in this process: their children and TMPDIRs, by pid.
_open_blocks: dict[int, tuple[Child, Path]] = {}


async def stop_supervised(grace_s: float = 5.0) -> None:
    """Stop the child of every open `supervised` block and remove its TMPDIR, side by side, and the
    warm templates: for an exit that will not wait for the blocks to end (a stdio server's os._exit)."""
    with anyio.CancelScope(shield=True):
        async with anyio.create_task_group() as tg:
            for child, _ in list(_open_blocks.values()):
                tg.start_soon(partial(stop, child, grace_s=grace_s))
            tg.start_soon(anyio.to_thread.run_sync, warm_start.stop_templates)
    for _, tmp in list(_open_blocks.values()):
        remove_tree(tmp)


def probe_client() -> httpx.AsyncClient:
    """The client of readiness probes: loopback only, so no proxy."""
    return httpx.AsyncClient(timeout=2.0, trust_env=False, verify=shared_tls())


async def health_ok(client: httpx.AsyncClient, url: str) -> bool:
    """True when `url` answers 200 (and, for a JSON body with a `status`, that status is "ok")."""
    try:
        resp = await client.get(url)
    except httpx.HTTPError:
        return False
    if resp.status_code != 200:
        return False
    try:
        body = resp.json()
    except ValueError:
        return True
    return not isinstance(body, dict) or body.get("status", "ok") == "ok"
