"""Log tails read from the end of the file, a cheap change check for watchers, and the server's own
log (its line format, and where it goes, for a child that logs there too).

A run's trainer log can grow to gigabytes; reading the last lines must cost the same for any
size, so we read fixed-size blocks backwards from the end, with a hard cap on bytes read.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_BLOCK = 8192
MAX_TAIL_BYTES = 1 << 20  # lines longer than this on average are cut: the bound that keeps it O(1)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_fd() -> int | None:
    """The file descriptor this process logs to (stderr, or `serve --log-file`), for a child whose
    lines belong in the same log; None when no handler writes to a real file."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):  # FileHandler too
            try:
                return int(handler.stream.fileno())
            except (AttributeError, OSError, ValueError):  # no stream yet, or one in memory
                continue
    return None


def tail_lines(path: Path, n: int = 200, *, max_bytes: int = MAX_TAIL_BYTES) -> list[str]:
    """The last `n` lines of `path` (fewer if the file is shorter); [] when it does not exist."""
    if n <= 0:
        return []
    try:
        with open(path, "rb") as fh:
            end = fh.seek(0, os.SEEK_END)
            pos = end
            chunks: list[bytes] = []
            newlines = 0
            # n lines need n+1 newlines before them, or the start of the file (last line may lack \n).
            while pos > 0 and newlines <= n and end - pos < max_bytes:
                step = min(_BLOCK, pos, max_bytes - (end - pos))
                pos -= step
                fh.seek(pos)
                chunk = fh.read(step)
                chunks.append(chunk)
                newlines += chunk.count(b"\n")
    except FileNotFoundError:
        return []
    data = b"".join(reversed(chunks))
    lines = data.decode("utf-8", errors="replace").splitlines()
    if pos > 0 and lines:
        lines = lines[1:]  # the first one is (probably) cut in the middle
    return lines[-n:]


@dataclass(frozen=True)
class FileStamp:
    """What changes when a file is appended to, truncated or replaced."""

    size: int
    mtime_ns: int
    inode: int

    @classmethod
    def of(cls, path: Path) -> FileStamp | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return cls(st.st_size, st.st_mtime_ns, st.st_ino)


class ChangeWatcher:
    """Remembers each file's last stamp; `changed(path)` says whether it moved since the last ask."""

    def __init__(self) -> None:
        self._stamps: dict[Path, FileStamp | None] = {}

    def changed(self, path: Path) -> bool:
        stamp = FileStamp.of(path)
        first = path not in self._stamps
        previous = self._stamps.get(path)
        self._stamps[path] = stamp
        return not first and stamp != previous

    def forget(self, path: Path) -> None:
        self._stamps.pop(path, None)


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b")


def last_error_line(lines: Sequence[str]) -> str | None:
    """The last `SomeError: message` line of a traceback, if the lines have one."""
    return next((line.strip() for line in reversed(lines) if _ERROR_LINE.match(line.strip())), None)


def marked_lines(path: Path, mark: str, *, max_bytes: int = MAX_TAIL_BYTES) -> list[str]:
    """The distinct texts after `mark` in the lines of `path` (its first `max_bytes`), in order."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(max_bytes).decode("utf-8", "replace")
    except FileNotFoundError:
        return []
    found = (line.split(mark, 1)[1].strip() for line in head.splitlines() if mark in line)
    return list(dict.fromkeys(found))
