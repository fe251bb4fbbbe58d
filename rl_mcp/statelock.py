"""One server per state dir: an exclusive lock on `RL_MCP_HOME/server.lock`, held for the app's life.

Two servers on one state dir would both adopt and supervise the same runs (and stop each other's
on exit). The lock is `fcntl.flock` on an open file descriptor: the kernel drops it when the
process dies, however it dies, so a stale lock never outlives its holder. The holder's pid is
written into the file so the refused server can say who holds it.

`flock` locks belong to an open file description, so a second `open_app` on the same home in the
same process is refused too (it would adopt the first one's runs just the same); the message then
says "this process". The descriptor is not inherited by children (Python opens it
non-inheritable), so a training run that outlives the server never holds the lock.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from rl_mcp.errors import UserError

LOCK_NAME = "server.lock"


class StateDirLocked(UserError):
    """Another rl-mcp server (or app in this process) holds the state dir."""


class StateLock:
    """The held lock; `release()` (idempotent) gives it back."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


def holder_pid(home: Path) -> int | None:
    """The pid written by the last holder (it may have exited since)."""
    try:
        text = (home / LOCK_NAME).read_text().split()
        return int(text[0]) if text else None
    except (OSError, ValueError):
        return None


def acquire(home: Path) -> StateLock:
    """Lock `home` for this app, or StateDirLocked naming the process that holds it."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        pid = holder_pid(home)
        who = "this process" if pid == os.getpid() else f"pid {pid}" if pid else "another process"
        raise StateDirLocked(
            f"state dir {home} is in use by another rl-mcp server ({who}, lock {path}): one server per "
            "state dir, so that runs are supervised once. Use that server, stop it, or give this one "
            "its own RL_MCP_HOME."
        ) from None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return StateLock(path, fd)
