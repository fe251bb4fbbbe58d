"""Environment discovery: env dirs parsed with `ast`, nothing imported or run.

A class is an environment when one of the formats' ancestors (`BaseEnv`, `HermesAgentBaseEnv`, ...)
is among its own, followed by name through every scanned file (so a shared base class in another file
counts); its format is the most specific of those. A file may be an environment of a file-based format
(verifiers' `load_environment`). A folder with a `pyproject.toml` and a module (`packages/folder.py`) is
an environment package: only its module's files are scanned, and its environments are named by the
module (a class's own `name` first); it runs once installed into a venv of its own
(`packages/install.py`). A format may list a class as other environments (reasoning-gym's tasks, the
user's tool servers, OpenEnv's folders and servers), serve a folder whole, and list environments
installed elsewhere: `rl_mcp/formats/` holds each one's rules.
"""

from __future__ import annotations

import ast
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_mcp.environments.packages.folder import PYPROJECT, PackageFolder, read_folder
from rl_mcp.environments.records import EnvironmentInfo
from rl_mcp.formats import ANCESTORS, FORMATS, class_format
from rl_mcp.formats.base import Places
from rl_mcp.settings import Settings

MAX_SCAN_DEPTH = 3


@dataclass(frozen=True)
class Catalog:
    """The result of one scan: environments by name plus what could not be used."""

    environments: dict[str, EnvironmentInfo]
    shadowed: list[dict[str, str]]
    errors: list[dict[str, str]]
    env_dirs: tuple[Path, ...]


@dataclass(frozen=True)
class _ClassDef:
    name: str
    bases: tuple[str, ...]
    env_name: str | None
    docstring: str
    config_class: str | None
    abstract: bool
    line: int


@dataclass(frozen=True)
class _FileScan:
    classes: tuple[_ClassDef, ...]
    error: str | None = None
    own: tuple[tuple[str, Any], ...] = ()  # (format, what it read in the file) for each file-based format's


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):  # Generic[...] style bases
        return _dotted(node.value)
    return None


def _assigned_names(stmt: ast.stmt) -> list[str]:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    return [t.id for t in targets if isinstance(t, ast.Name)]


def _config_class(body: list[ast.stmt]) -> str | None:
    """`env_config_cls = X`, else the first `...Config(...)` call inside `config_init`."""
    for stmt in body:
        value = getattr(stmt, "value", None) if "env_config_cls" in _assigned_names(stmt) else None
        if isinstance(value, ast.expr):
            return _dotted(value)
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "config_init":
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and (called := _dotted(node.func)) and called.endswith("Config"):
                    return called
    return None


def _class_attr_str(body: list[ast.stmt], attr: str) -> str | None:
    for stmt in body:
        value = getattr(stmt, "value", None) if attr in _assigned_names(stmt) else None
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value:
            return value.value
    return None


def _is_abstract(body: list[ast.stmt]) -> bool:
    return any(
        isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
        and any(_dotted(d) == "abstractmethod" for d in stmt.decorator_list)
        for stmt in body
    )


def scan_file(path: Path) -> _FileScan:
    """Top-level classes of one file and what file-based formats read in it, or why it could not be parsed."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        return _FileScan(classes=(), error=f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}{where}")
    module_doc = (ast.get_docstring(tree) or "").strip()
    classes = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        doc = (ast.get_docstring(node) or "").strip() or module_doc
        classes.append(
            _ClassDef(
                name=node.name,
                bases=tuple(b for b in (_dotted(base) for base in node.bases) if b),
                env_name=_class_attr_str(node.body, "name"),
                docstring=doc.splitlines()[0] if doc else "",
                config_class=_config_class(node.body),
                abstract=_is_abstract(node.body),
                line=node.lineno,
            )
        )
    own = tuple((f.name, found) for f in FORMATS.values() if (found := f.read_module(tree)) is not None)
    return _FileScan(classes=tuple(classes), own=own)


def _python_files(root: Path) -> list[tuple[Path, PackageFolder | None]]:
    """The files to scan, each with the environment folder whose module it is part of (else None)."""
    out: list[tuple[Path, PackageFolder | None]] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if any(f.serves_folder(filenames) for f in FORMATS.values()):  # served whole by its format, not scanned
            dirnames[:] = []
            continue
        package = read_folder(here) if PYPROJECT in filenames else None
        if package is not None:  # its module's files only (its `__init__.py` included), nothing else in it
            dirnames[:] = []
            out.extend((path, package) for path in package.files())
            continue
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith((".", "_")) and len(here.parts) - base_depth < MAX_SCAN_DEPTH
        )
        out.extend((here / f, None) for f in sorted(filenames) if f.endswith(".py") and not f.startswith("_"))
    return out


class Discovery:
    """Scans the env dirs; per-file parses are cached by (mtime, size) so a rescan is cheap."""

    def __init__(self, env_dirs: tuple[Path, ...], places: Places | None = None) -> None:
        self.env_dirs = env_dirs
        self.places = places or Places()  # where formats look beyond the env dirs (none: the dirs alone)
        self._parsed: dict[Path, tuple[tuple[int, int], _FileScan]] = {}

    @classmethod
    def for_settings(cls, settings: Settings) -> Discovery:
        """What a server lists: its env dirs, and what each format finds from its home and variables
        (the verifiers runtimes' packages, the tool-servers file, OpenEnv's servers and distributions)."""
        return cls(settings.env_dirs, Places(settings.home, settings.environ))

    def _scan(self, path: Path) -> _FileScan:
        st = path.stat()
        key = (st.st_mtime_ns, st.st_size)
        hit = self._parsed.get(path)
        if hit and hit[0] == key:
            return hit[1]
        result = scan_file(path)
        self._parsed[path] = (key, result)
        return result

    def _listed_as(
        self, info: EnvironmentInfo, served: dict[str, list[Path]], errors: list[dict[str, str]]
    ) -> list[EnvironmentInfo]:
        """What a discovered environment is listed as: a format's environments hosted by its class (the
        folders it serves among them), else itself."""
        for f in FORMATS.values():
            listed = f.listed_as(info, self.places, served[f.name], errors)
            if listed is not None:
                return listed
        return [info]

    def scan(self) -> Catalog:
        files: list[tuple[Path, Path, _FileScan, PackageFolder | None]] = []
        errors: list[dict[str, str]] = []
        served: dict[str, list[Path]] = {f.name: [] for f in FORMATS.values()}  # folders each format serves whole
        for env_dir in self.env_dirs:
            if not env_dir.is_dir():
                errors.append({"file": str(env_dir), "error": "environment directory does not exist"})
                continue
            for f in FORMATS.values():
                served[f.name] += f.folders(env_dir)
            for path, package in _python_files(env_dir):
                try:
                    scanned = self._scan(path)
                except OSError as exc:
                    scanned = _FileScan(classes=(), error=f"{type(exc).__name__}: {exc}")
                if scanned.error:
                    errors.append({"file": str(path), "error": scanned.error})
                files.append((env_dir, path, scanned, package))
        # A class is an environment if BaseEnv is among its ancestors, following bases by name
        # through every scanned file (so a shared base class in another file counts).
        by_name: dict[str, list[_ClassDef]] = {}
        for _, _, scanned, _ in files:
            for cls in scanned.classes:
                by_name.setdefault(cls.name, []).append(cls)
        memo: dict[tuple[str, frozenset[str]], bool] = {}

        def reaches(name: str, targets: frozenset[str], seen: frozenset[str] = frozenset()) -> bool:
            if name in targets:
                return True
            if (name, targets) in memo:
                return memo[name, targets]
            if name in seen:
                return False
            result = any(reaches(b, targets, seen | {name}) for c in by_name.get(name, ()) for b in c.bases)
            memo[name, targets] = result
            return result

        def reaches_any(bases: tuple[str, ...], targets: frozenset[str]) -> bool:
            return any(reaches(b, targets) for b in bases)

        used_as_base = {b for _, _, scanned, _ in files for c in scanned.classes for b in c.bases}
        environments: dict[str, EnvironmentInfo] = {}
        shadowed: list[dict[str, str]] = []

        def add(info: EnvironmentInfo) -> None:
            kept = environments.get(info.name)
            if kept is None:
                environments[info.name] = info
            else:  # first wins: env dirs in order, then path, then line
                shadowed.append(
                    {
                        "name": info.name,
                        "file": str(info.file),
                        "class_name": info.class_name,
                        "shadowed_by": f"{kept.file}:{kept.class_name}",
                    }
                )

        for env_dir, path, scanned, package in files:
            own = package.module if package is not None else path.stem  # a folder's environments: its module's name
            found: list[EnvironmentInfo] = []
            for cls in scanned.classes:
                if not reaches_any(cls.bases, ANCESTORS):
                    continue
                if cls.abstract or (cls.name in used_as_base and cls.env_name is None):
                    continue  # a shared base class, not a runnable environment
                found.append(
                    EnvironmentInfo(
                        name=cls.env_name or own,
                        class_name=cls.name,
                        file=path,
                        env_dir=env_dir,
                        line=cls.line,
                        description=cls.docstring,
                        config_class=cls.config_class or "BaseEnvConfig",
                        format=class_format(functools.partial(reaches_any, cls.bases)),
                        package=package,
                    )
                )
            for name, read in scanned.own:
                if (info := FORMATS[name].file_environment(read, path, env_dir, package)) is not None:
                    found.append(info)
            for info in sorted(found, key=lambda i: i.line):
                for each in self._listed_as(info, served, errors):
                    add(each)
        for f in FORMATS.values():  # after the env dirs: a file there shadows a package
            for info in f.installed(self.places):
                add(info)
        return Catalog(environments=environments, shadowed=shadowed, errors=errors, env_dirs=self.env_dirs)
