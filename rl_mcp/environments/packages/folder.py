"""What an environment folder is (pure: files read, nothing run): its pyproject's project, the module
it ships, the files discovery scans, and the hash of its contents that decides a reinstall."""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

PYPROJECT = "pyproject.toml"
# what a build or an editor leaves in a folder: not its contents (a build writes `*.egg-info` there)
_IGNORED_DIRS = frozenset({"__pycache__", ".git", ".venv", "build", "dist", ".mypy_cache", ".pytest_cache"})
_IGNORED_SUFFIXES = (".pyc", ".egg-info")


@dataclass(frozen=True)
class PackageFolder:
    """An environment folder: where it is, its distribution and module names, what it declares."""

    path: Path
    distribution: str
    module: str
    module_path: Path  # `<module>/` (a package) or `<module>.py`
    dependencies: tuple[str, ...]

    def files(self) -> list[Path]:
        """The module's Python files (a package's `__init__.py` included): what discovery scans."""
        if self.module_path.is_file():
            return [self.module_path]
        out: list[Path] = []
        for dirpath, dirnames, filenames in os.walk(self.module_path):
            dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_DIRS and not d.startswith("."))
            out.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
        return out


def normalize(name: str) -> str:
    """A distribution's name as the registry compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _candidates(folder: Path, project: str, tool: dict[str, object]) -> list[str]:
    """Module names to try, in order: setuptools' `packages` / `py-modules`, the project's name, the
    folder's only package or module."""
    setuptools = tool.get("setuptools")
    named: list[str] = []
    if isinstance(setuptools, dict):
        for key in ("packages", "py-modules"):
            value = setuptools.get(key)
            if isinstance(value, list):
                named.extend(str(v).split(".")[0] for v in value)
    named.append(normalize(project).replace("-", "_"))
    own = sorted(p.name for p in folder.iterdir() if (p / "__init__.py").is_file() and p.name not in _IGNORED_DIRS)
    own += sorted(p.stem for p in folder.glob("*.py") if p.name != "setup.py")
    return named + (own if len(own) == 1 else [])


def read_project(folder: Path) -> tuple[str, tuple[str, ...], dict[str, object]] | None:
    """The folder's pyproject `[project]`: its name, its dependencies and its `[tool]` table; None
    without a readable one."""
    try:
        data = tomllib.loads((folder / PYPROJECT).read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    project = data.get("project")
    if not isinstance(project, dict) or not isinstance(project.get("name"), str):
        return None
    tool_table = data.get("tool")
    deps = project.get("dependencies")
    dependencies = tuple(str(d) for d in deps) if isinstance(deps, list) else ()
    return project["name"], dependencies, tool_table if isinstance(tool_table, dict) else {}


def read_folder(folder: Path) -> PackageFolder | None:
    """The environment package a folder holds, or None: no pyproject.toml, no `[project]` name, or no
    module of it found in the folder (flat layout or `src/`)."""
    project = read_project(folder)
    if project is None:
        return None
    name, dependencies, tool = project
    for module in _candidates(folder, name, tool):
        for base in (folder, folder / "src"):
            for path in (base / module, base / f"{module}.py"):
                if (path / "__init__.py").is_file() or (path.suffix == ".py" and path.is_file()):
                    return PackageFolder(folder, name, module, path, dependencies)
    return None


def content_hash(folder: Path) -> str:
    """sha256 of the folder's files (paths and bytes), less what builds and caches leave there."""
    digest = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_DIRS and not d.endswith(_IGNORED_SUFFIXES))
        for name in sorted(filenames):
            if name.endswith(_IGNORED_SUFFIXES):
                continue
            path = Path(dirpath) / name
            digest.update(str(path.relative_to(folder)).encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError:
                digest.update(b"<unreadable>")
            digest.update(b"\0")
    return digest.hexdigest()
