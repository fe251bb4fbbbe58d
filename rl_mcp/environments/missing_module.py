"""A missing module, named with the fix that works here (pure, files read only).

An environment's import error names neither the venv it runs in nor how to add a package there, and
its own advice (`uv add ...`) assumes another project. Read from the error's text (a child's log or
traceback): the module, the venv, and the command that adds its distribution to that venv, with the
original message kept below. The distribution is found from installed metadata where some venv of
this product has it (`reasoning_gym` -> `reasoning-gym`), else from the module's name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rl_mcp.environments.packages.folder import normalize

_MISSING = re.compile(r"(?:ModuleNotFoundError|ImportError): No module named '([A-Za-z_][\w.]*)'")
# where the import name differs from the distribution and no venv here has it installed
KNOWN = {"yaml": "PyYAML", "PIL": "Pillow", "cv2": "opencv-python", "sklearn": "scikit-learn", "bs4": "beautifulsoup4"}
ORIGINAL_LINES = 6
MODULE_TAIL_LINES = 400  # of a failed environment's log, searched for the import error


@dataclass(frozen=True)
class ModuleHome:
    """Where an environment's own code imports from: its venv, how to name it, and its folder's
    pyproject when it is an installed environment folder (whose install is the fix)."""

    venv: Path
    label: str
    pyproject: Path | None = None
    lookup: tuple[Path, ...] = ()  # site-packages whose metadata maps a module to its distribution

    def pip(self) -> str:
        pip = self.venv / "bin" / "pip"
        return str(pip) if pip.exists() else f"{self.venv / 'bin' / 'python'} -m pip"


def missing_module(text: str) -> str | None:
    """The top-level module the last `No module named 'x.y'` of `text` names, if any."""
    found = _MISSING.findall(text)
    return found[-1].split(".")[0] if found else None


def _top_level(dist_info: Path) -> list[str]:
    listed = dist_info / "top_level.txt"
    if listed.is_file():
        return [n.strip() for n in listed.read_text(errors="replace").splitlines() if n.strip()]
    record = dist_info / "RECORD"
    lines = record.read_text(errors="replace").splitlines() if record.is_file() else []
    return list(dict.fromkeys(line.split(",", 1)[0].split("/", 1)[0].removesuffix(".py") for line in lines))


def _name(dist_info: Path) -> str:
    try:
        for line in (dist_info / "METADATA").read_text(errors="replace").splitlines():
            if line.startswith("Name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return dist_info.name.removesuffix(".dist-info").partition("-")[0]


def distribution_for(module: str, site_dirs: Iterable[Path]) -> str:
    """The distribution that provides `module`, from the metadata of these site-packages, else the
    known aliases, else the module's name (the registry reads `_` and `-` alike)."""
    for site in site_dirs:
        for dist_info in sorted(site.glob("*.dist-info")):
            if module in _top_level(dist_info):
                return normalize(_name(dist_info))  # as the registry names it: reasoning_gym -> reasoning-gym
    return KNOWN.get(module, module.replace("_", "-"))


def explained(error: str | None, log_tail: list[str], home: ModuleHome) -> str | None:
    """`error` with what to do first when the log's tail names a missing module (a run's failure)."""
    missing = explain("\n".join(log_tail), home)
    return f"{missing}\n{error}" if missing and error else missing or error


def explain(text: str, home: ModuleHome) -> str | None:
    """The message for a missing module in `text` (None when it names none): the module, the venv it
    runs in, the command that adds it there, then the original lines that mention it."""
    module = missing_module(text)
    if module is None:
        return None
    dist = distribution_for(module, home.lookup)
    fix = f"`{home.pip()} install {dist}`"
    if home.pyproject is not None:
        fix = (
            f'add "{dist}" to `dependencies` in {home.pyproject}: the folder is reinstalled into that venv on '
            f"its next use (rl_test_inference, rl_start_training); or now: {fix}"
        )
    lines = [line.rstrip() for line in text.splitlines() if "Error" in line and line.strip()]
    original = "\n".join(f"  {line.strip()}" for line in lines[-ORIGINAL_LINES:])
    return (
        f"module {module!r} is not installed in the venv this environment runs in, {home.venv} ({home.label}). "
        f"To add it there: {fix}\nThe original error:\n{original}"
    )
