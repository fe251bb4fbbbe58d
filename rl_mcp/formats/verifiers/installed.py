"""verifiers environments installed as packages in the verifiers venv (`pip install` there, as the
Environments Hub's `prime env install` does), found from the venv's files: each distribution that
requires `verifiers`, its top-level modules read from their AST as a verifiers file is (nothing
imported). A run loads one by module name (`vf.load_environment(<module>)`), so its own relative
imports and data files work as installed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from rl_mcp.formats.verifiers.files import VerifiersEnv, read_file
from tinker_atropos.venvs import site_dirs

_REQUIRES_VERIFIERS = re.compile(r"^Requires-Dist:\s*verifiers(?![\w.-])", re.MULTILINE | re.IGNORECASE)
_NOT_MODULES = ["__pycache__", "bin", "share", "include"]  # folders beside modules in a RECORD


@dataclass(frozen=True)
class PackageEnv:
    """One installed verifiers environment: its module, the file that defines it, what it says."""

    module: str
    file: Path
    site: Path
    found: VerifiersEnv


def _top_level(dist_info: Path) -> list[str]:
    """The distribution's top-level module names: top_level.txt, else the first parts of RECORD."""
    listed = dist_info / "top_level.txt"
    if listed.is_file():
        return [n.strip() for n in listed.read_text().splitlines() if n.strip()]
    names: list[str] = []
    record = dist_info / "RECORD"
    for line in record.read_text().splitlines() if record.is_file() else []:
        path = line.split(",", 1)[0]
        first, nested = path.split("/", 1)[0], "/" in path
        name = first if nested else first.removesuffix(".py")
        if (nested or first.endswith(".py")) and name.isidentifier() and name not in _NOT_MODULES + names:
            names.append(name)
    return names


def installed(python: Path) -> list[PackageEnv]:
    """Every verifiers environment installed in the venv, by module name."""
    out: list[PackageEnv] = []
    for site in site_dirs(python):
        for dist_info in sorted(site.glob("*.dist-info")):
            metadata = dist_info / "METADATA"
            try:
                if not _REQUIRES_VERIFIERS.search(metadata.read_text(errors="replace")):
                    continue
            except OSError:
                continue
            for module in _top_level(dist_info):
                for file in (site / f"{module}.py", site / module / "__init__.py"):
                    if file.is_file() and (found := read_file(file)) is not None:
                        out.append(PackageEnv(module=module, file=file, site=site, found=found))
                        break
    return out
