"""Environment discovery: env dirs parsed with `ast`, nothing imported or run.

A class is an environment when `BaseEnv` is among its ancestors, followed by name through every
scanned file (so a shared base class in another file counts): format `hermes` when
`HermesAgentBaseEnv` is among them, else `atropos`. A file defining verifiers' `load_environment` is
one too, named by its stem (`verifiers_format.py` says which and its format). A folder with a
`pyproject.toml` and a module (`packages/folder.py`) is an environment package: only its module's files
are scanned, and its environments are named by the module (a class's own `name` first); it runs once
installed into a venv of its own (`packages/install.py`). The bundled
`ReasoningGymEnv` also lists each reasoning-gym task as `reasoning_gym:<task>` (`reasoning_gym_format.py`);
the bundled `McpToolsEnv` is listed as each server of the tool-servers file, `mcp:<name>` (`mcp_format.py`);
the bundled `OpenEnvEnv` as each OpenEnv folder, installed OpenEnv distribution and OpenEnv server by
URL, `openenv:<name>` (`openenv_format.py`: an OpenEnv folder's own Python files are not scanned).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from rl_mcp.environments import mcp_format, openenv_format, reasoning_gym_format, verifiers_packages
from rl_mcp.environments.packages.folder import PYPROJECT, PackageFolder, read_folder
from rl_mcp.environments.verifiers_format import ENTRY_POINT, VerifiersEnv, read_module
from rl_mcp.settings import Settings
from tinker_atropos.mcp_tools.servers_file import servers_path
from tinker_atropos.venvs import OPENENV, packages_stamp, verifiers_venvs

# atroposlib's BaseEnv, and the agent base (a BaseEnv in tinker_atropos/agent, outside the env dirs).
BASE_CLASSES = frozenset({"BaseEnv", "HermesAgentBaseEnv"})
HERMES_BASES = frozenset({"HermesAgentBaseEnv"})
MAX_SCAN_DEPTH = 3
_Entries = tuple[reasoning_gym_format.TaskEntry, ...]
EnvFormat = Literal["atropos", "hermes", "verifiers", "verifiers-v1", "reasoning-gym", "mcp", "openenv"]


@dataclass(frozen=True)
class EnvironmentInfo:
    """One discovered environment class."""

    name: str
    class_name: str
    file: Path
    env_dir: Path
    line: int
    description: str
    config_class: str
    format: EnvFormat = "atropos"
    task: str | None = None  # a reasoning-gym task: this runs `class_name` with `task` set
    module: str | None = None  # a verifiers environment installed as a package: loaded by this name
    package: PackageFolder | None = None  # an environment folder with a pyproject: installed before it runs
    server: str | None = None  # an MCP tool server (format mcp): this runs `class_name` with `mcp_server` set
    openenv: openenv_format.OpenEnvEntry | None = None  # an OpenEnv folder or server (format openenv)


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
    verifiers: VerifiersEnv | None = None  # the file's `load_environment`, when it is a verifiers environment


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
    """Top-level classes of one file and its verifiers `load_environment`, or why it could not be parsed."""
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
    return _FileScan(classes=tuple(classes), verifiers=read_module(tree))


def _python_files(root: Path) -> list[tuple[Path, PackageFolder | None]]:
    """The files to scan, each with the environment folder whose module it is part of (else None)."""
    out: list[tuple[Path, PackageFolder | None]] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if openenv_format.is_manifest_among(filenames):  # an OpenEnv folder: served, not scanned (openenv_format.py)
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

    def __init__(
        self,
        env_dirs: tuple[Path, ...],
        verifiers_venvs: Mapping[str, Path] | None = None,
        tool_servers: Path | None = None,
        openenv_servers: Path | None = None,
        openenv_python: Path | None = None,
    ) -> None:
        self.env_dirs = env_dirs
        self.tool_servers = tool_servers  # the tool-servers file: its servers are environments mcp:<name>
        self.openenv_servers = openenv_servers  # the OpenEnv servers file: each server by URL, openenv:<name>
        self.openenv_python = openenv_python  # the OpenEnv venv: its installed openenv-* distributions
        # format -> the Python of its venv: the environments installed there are listed too
        self.verifiers_venvs = dict(verifiers_venvs or {})
        self._packages: tuple[tuple[tuple[str, tuple[int, ...]], ...], list[EnvironmentInfo]] = ((), [])
        self._parsed: dict[Path, tuple[tuple[int, int], _FileScan]] = {}
        self._tasks: dict[
            EnvironmentInfo, tuple[tuple[reasoning_gym_format.TaskEntry, ...], list[EnvironmentInfo]]
        ] = {}

    @classmethod
    def for_settings(cls, settings: Settings) -> Discovery:
        """What a server lists: its env dirs, the verifiers venvs' packages, the tool-servers file's
        servers, the OpenEnv servers file's and the OpenEnv venv's distributions."""
        environ = settings.environ
        return cls(
            settings.env_dirs,
            verifiers_venvs(environ),
            servers_path(environ, settings.home),
            openenv_format.servers_path(environ, settings.home),
            OPENENV.python(environ),
        )

    def _scan(self, path: Path) -> _FileScan:
        st = path.stat()
        key = (st.st_mtime_ns, st.st_size)
        hit = self._parsed.get(path)
        if hit and hit[0] == key:
            return hit[1]
        result = scan_file(path)
        self._parsed[path] = (key, result)
        return result

    def _tasks_of(self, host: EnvironmentInfo) -> list[EnvironmentInfo]:
        """reasoning-gym's tasks as environments run by `host`, rebuilt only when the catalog changes."""
        entries = reasoning_gym_format.task_entries()
        hit = self._tasks.get(host)
        if hit is None or hit[0] is not entries:
            tasks = [
                replace(
                    host,
                    name=e.name,
                    description=e.description,
                    config_class=e.config_class,
                    format="reasoning-gym",
                    task=e.task,
                )
                for e in entries
            ]
            hit = self._tasks[host] = (entries, tasks)
        return hit[1]

    def _hosted(
        self, host: EnvironmentInfo, folders: list[Path], errors: list[dict[str, str]]
    ) -> list[EnvironmentInfo] | None:
        """What a host class is listed as: the tool servers (McpToolsEnv), the OpenEnv environments
        (OpenEnvEnv); None for any other class. An unreadable file is a scan error."""
        if mcp_format.is_host(host.file, host.class_name):
            try:
                servers = mcp_format.server_entries(self.tool_servers) if self.tool_servers else ()
            except ValueError as exc:
                errors.append({"file": str(self.tool_servers), "error": str(exc)})
                servers = ()
            return [
                replace(host, name=e.name, description=e.description, format="mcp", server=e.server) for e in servers
            ]
        if openenv_format.is_host(host.file, host.class_name):
            found, problems = openenv_format.entries(folders, self.openenv_python, self.openenv_servers)
            errors += problems
            return [
                replace(host, name=e.name, description=e.description, format="openenv", openenv=e, package=e.package)
                for e in found
            ]
        return None

    def _installed(self) -> list[EnvironmentInfo]:
        """The verifiers venvs' installed environments (each venv's own API generation), read again
        only when a venv's site-packages change."""
        now = tuple((f, packages_stamp(p, {})) for f, p in sorted(self.verifiers_venvs.items()))
        if now != self._packages[0]:
            found = [
                EnvironmentInfo(
                    name=p.module,
                    class_name=ENTRY_POINT,
                    file=p.file,
                    env_dir=p.site,
                    line=p.found.line,
                    description=p.found.description,
                    config_class=p.found.config_class,
                    format=p.found.format,
                    module=p.module,
                )
                for env_format, python in sorted(self.verifiers_venvs.items())
                for p in verifiers_packages.installed(python)
                if p.found.format == env_format  # a classic module in the v1 venv cannot run there
            ]
            self._packages = (now, found)
        return self._packages[1]

    def scan(self) -> Catalog:
        files: list[tuple[Path, Path, _FileScan, PackageFolder | None]] = []
        errors: list[dict[str, str]] = []
        openenv_folders: list[Path] = []
        for env_dir in self.env_dirs:
            if not env_dir.is_dir():
                errors.append({"file": str(env_dir), "error": "environment directory does not exist"})
                continue
            openenv_folders += openenv_format.folders_in(env_dir)
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
                if not any(reaches(b, BASE_CLASSES) for b in cls.bases):
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
                        format="hermes" if any(reaches(b, HERMES_BASES) for b in cls.bases) else "atropos",
                        package=package,
                    )
                )
            if (vf := scanned.verifiers) is not None:
                found.append(
                    EnvironmentInfo(
                        name=own,
                        class_name=ENTRY_POINT,
                        file=path,
                        env_dir=env_dir,
                        line=vf.line,
                        description=vf.description,
                        config_class=vf.config_class,
                        format=vf.format,
                        module=package.module if package is not None else None,  # loaded as installed
                        package=package,
                    )
                )
            for info in sorted(found, key=lambda i: i.line):
                hosted = self._hosted(info, openenv_folders, errors)
                if hosted is not None:
                    for each in hosted:
                        add(each)
                    continue
                add(info)
                if reasoning_gym_format.is_task_host(info.file, info.class_name):
                    for task in self._tasks_of(info):
                        add(task)
        for info in self._installed():  # after the env dirs: a file there shadows a package
            add(info)
        return Catalog(environments=environments, shadowed=shadowed, errors=errors, env_dirs=self.env_dirs)
