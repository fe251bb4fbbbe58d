"""bubblewrap's mount arguments, built in order: what a container shows of the host, for the agent
sandbox and for a sandboxed MCP tool server alike.

A bwrap mount hides whatever an earlier one put beneath it (`--tmpfs /tmp` hides a venv or a
checkout under the host's `/tmp`), so `Mounts` remembers what it has mounted and `read_only` binds
again only what the container would not show: each path that is needed, with the folders above
it. `program_paths` says what a program needs to start: its file, its interpreter, that
interpreter's venv (and the folders its `.pth` files add) and base installation. Stdlib only.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

TMP = Path("/tmp")


@dataclass
class Mounts:
    """The arguments so far, and what each mount point shows: a host folder or an empty one."""

    args: list[str] = field(default_factory=list)
    _points: dict[Path, bool] = field(default_factory=dict)  # mount point -> shows the host's files

    def host_read_only(self, folders: Iterable[str]) -> None:
        """Host folders read-only at their own paths (a link as the same link)."""
        for d in folders:
            if os.path.islink(d):
                self.args += ["--symlink", os.readlink(d), d]
                self._points[Path(d)] = True
            elif os.path.isdir(d):
                self.args += ["--ro-bind", d, d]
                self._points[Path(d)] = True

    def devices(self) -> None:
        self.args += ["--dev", "/dev", "--proc", "/proc"]
        self._points |= {Path("/dev"): False, Path("/proc"): False}

    def private_tmp(self, size_bytes: int | None = None) -> None:
        """An empty `/tmp` in memory (bounded when a size is given), hiding the host's."""
        self.args += [*(["--size", str(size_bytes)] if size_bytes else []), "--tmpfs", str(TMP)]
        self._points[TMP] = False

    def folder(self, path: str, mode: str = "0755") -> None:
        self.args += ["--perms", mode, "--dir", path]
        self._points[Path(path)] = False

    def writable(self, source: Path | str, inside: str) -> None:
        self.args += ["--bind", str(source), inside]
        self._points[Path(inside)] = True

    def read_only(self, paths: Iterable[Path | str]) -> None:
        """Each path the container does not show yet, bound read-only at its own path, with the
        folders above it made (readable by the container's user); a folder before what it holds."""
        for path in sorted(map(Path, paths), key=lambda p: len(p.parts)):
            if self.shows(path):
                continue
            self._parents(path)
            self.args += ["--ro-bind", str(path), str(path)]  # bwrap fails, naming it, if it does not exist
            self._points[path] = True

    def writable_in_place(self, folder: Path) -> None:
        """A host folder writable at its own path, the folders above it made (a harness's home)."""
        self._parents(folder)
        self.writable(folder, str(folder))

    def _parents(self, path: Path) -> None:
        for parent in reversed(path.parents[:-1]):
            if not self._exists(parent):
                self.folder(str(parent))

    def shows(self, path: Path) -> bool:
        """Whether the host's file at `path` is visible: the deepest mount above it shows the host."""
        point = self._deepest(path)
        return point is not None and self._points[point]

    def _exists(self, path: Path) -> bool:
        return path in self._points or self.shows(path)

    def _deepest(self, path: Path) -> Path | None:
        above = [p for p in self._points if p == path or p in path.parents]
        return max(above, key=lambda p: len(p.parts), default=None)


def program_paths(command: str, args: Iterable[str] = ()) -> list[Path]:
    """What a program needs of the host to start: the command file, the interpreter its `#!` line
    names (or the command itself), that interpreter's venv with the folders its `.pth` files add,
    the venv's base installation, and the files among its arguments (a script it runs)."""
    found = Path(command)
    interpreter = _shebang(found) or found
    paths = [found, found.resolve(), interpreter, interpreter.resolve()]
    venv = _venv_of(interpreter)
    if venv is not None:
        paths += [venv, *_base_prefix(venv), *_pth_folders(venv)]
    paths += [Path(a) for a in args if os.path.isabs(a) and os.path.isfile(a)]
    return list(dict.fromkeys(p for p in paths if p.exists()))


def _shebang(path: Path) -> Path | None:
    try:
        with path.open("rb") as f:
            line = f.readline(4096)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if Path(words[0]).name == "env" and len(words) > 1:  # `#!/usr/bin/env python3`: the one on PATH
        named = shutil.which(words[-1])
        return Path(named) if named else None
    return Path(words[0])


def _venv_of(interpreter: Path) -> Path | None:
    root = interpreter.parent.parent
    return root if (root / "pyvenv.cfg").is_file() else None


def _base_prefix(venv: Path) -> list[Path]:
    for line in (venv / "pyvenv.cfg").read_text(errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return [Path(value.strip()).parent]
    return [Path(sys.base_prefix)]


def _pth_folders(venv: Path) -> list[Path]:
    """Folders a venv's `.pth` files put on its path: an editable install, a layered venv's parent."""
    out: list[Path] = []
    for pth in venv.glob("lib/python*/site-packages/*.pth"):
        for line in pth.read_text(errors="replace").splitlines():
            line = line.strip()
            if line and not line.startswith(("#", "import ")) and os.path.isabs(line) and os.path.isdir(line):
                out.append(Path(line))
    return out
