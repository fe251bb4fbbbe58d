"""File reads and writes that cannot leave a directory, even while processes inside it swap
paths for symlinks: the path is resolved first (`Sandbox.resolve`), then opened one component at
a time from a descriptor of the root with O_NOFOLLOW, so a link that appears in between is met
as an error, never followed."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import NoReturn

from tinker_atropos.agent.sandboxes.base import SandboxEscape

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def read(root: Path, target: Path, limit: int, shown: str) -> bytes:
    """At most `limit` bytes of the regular file `target` (FileNotFoundError / IsADirectoryError)."""
    if target == root:
        raise IsADirectoryError(shown)
    parent = _open_parent(root, target, shown, create=False)
    try:
        fd = _open_leaf(parent, target.name, os.O_RDONLY | os.O_NONBLOCK, shown)
    finally:
        os.close(parent)
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(shown)
        if not stat.S_ISREG(mode):  # a FIFO or a device would block or never end
            raise FileNotFoundError(shown)
        os.set_blocking(fd, True)
        return f.read(limit)


def write(root: Path, target: Path, data: bytes, shown: str) -> bool:
    """Write `data` to `target`, creating its parent directories; True when some were created."""
    if target == root:
        raise IsADirectoryError(shown)
    created: list[bool] = []
    parent = _open_parent(root, target, shown, create=True, created=created)
    try:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK
        fd = _open_leaf(parent, target.name, flags, shown)
    finally:
        os.close(parent)
    with os.fdopen(fd, "wb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise IsADirectoryError(shown) if stat.S_ISDIR(os.fstat(fd).st_mode) else FileNotFoundError(shown)
        os.set_blocking(fd, True)
        os.ftruncate(fd, 0)
        f.write(data)
    return bool(created)


def _open_parent(root: Path, target: Path, shown: str, create: bool, created: list[bool] | None = None) -> int:
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in target.parent.relative_to(root).parts:
            if create:
                try:
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if created is not None:
                        created.append(True)
                except FileExistsError:
                    pass
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                _raise_for(exc, shown, fd, part)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_leaf(parent: int, name: str, flags: int, shown: str) -> int:
    try:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=parent)
    except OSError as exc:
        _raise_for(exc, shown, parent, name)


def _raise_for(exc: OSError, shown: str, parent: int, name: str) -> NoReturn:
    try:
        swapped = stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode)
    except OSError:
        swapped = False
    if swapped or exc.errno == errno.ELOOP:
        raise SandboxEscape(f"path {shown!r} became a symlink while it was opened: not followed") from exc
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        raise FileNotFoundError(shown) from exc
    if exc.errno == errno.EISDIR:
        raise IsADirectoryError(shown) from exc
    raise exc
