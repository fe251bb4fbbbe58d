"""The product's name on PyPI and the command a user types: one place for both, because `rl-mcp` on PyPI
is another project, and every line that tells a user what to install or run must name ours.

The console script carries the distribution's name, as the reference servers' do (`mcp-server-git`), so
`uvx mcp-server-rl serve` needs no `--from`; `rl-mcp` stays a second script of the same install.
"""

from __future__ import annotations

import shutil
import sys
from importlib.metadata import PackageNotFoundError, packages_distributions, version
from pathlib import Path

DISTRIBUTION = "mcp-server-rl"
COMMAND = DISTRIBUTION
# PyPI's `rl-mcp`: robotics RL (mjlab, IsaacLab) by another author, import package `rlmcp`
OTHER_PROJECT = "rl-mcp"
OTHER_PROJECT_PACKAGE = "rlmcp"


def installed_version() -> str | None:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def other_project_version() -> str | None:
    """The version of PyPI's other `rl-mcp` where it is installed beside this one (told apart by its import
    package, since a checkout installed before the rename also answers to that name)."""
    if OTHER_PROJECT_PACKAGE not in packages_distributions():
        return None
    try:
        return version(OTHER_PROJECT)
    except PackageNotFoundError:
        return None


def command_line(*args: str) -> str:
    """`mcp-server-rl ARGS` as this install can be run from a user's shell: `uvx` where this install is one
    of uv's throwaway environments (what a client's `uvx` line launches; uv puts that folder on the
    server's PATH, not on the user's), the bare command where it is on PATH, else this install's script
    by its path (a checkout's .venv, a venv)."""
    script = Path(sys.executable).with_name(COMMAND)
    found = shutil.which(COMMAND)
    if _uvx_environment(Path(sys.prefix)) or not script.exists():
        prefix = f"uvx {DISTRIBUTION}"
    elif found and Path(found).resolve() == script.resolve():
        prefix = COMMAND
    else:
        prefix = str(script)
    return " ".join((prefix, *args))


def _uvx_environment(prefix: Path) -> bool:
    """uvx runs a tool from an environment in uv's cache (`<cache>/archive-v0/<hash>`)."""
    return prefix.parent.name.startswith("archive-v")
