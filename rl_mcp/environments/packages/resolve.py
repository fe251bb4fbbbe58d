"""What pip's dry run says about an environment folder's install (pure): the distributions it would
add, those that would replace a version the parent venv pins (a conflict), a requirement the registry
cannot meet. The parent venv is never changed, so a replacement is refused, not shadowed."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_mcp.environments.packages.folder import normalize

_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_NOT_FOUND = re.compile(r"No matching distribution found for (\S+)")
_ERROR_LINE = re.compile(r"^ERROR: (.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Planned:
    """One distribution the install would add to the environment's venv."""

    name: str
    version: str
    requires: tuple[str, ...]


@dataclass(frozen=True)
class Conflict:
    """A distribution the install would need at another version than the parent venv has."""

    name: str
    wanted: str  # the version pip picked
    installed: str  # the parent venv's
    required_as: tuple[str, ...]  # the requirements that ask for it: `idna==3.6 (by conflict-pin)`
    required_there_by: tuple[str, ...]  # the parent's distributions that require it


def requirement_name(requirement: str) -> str:
    """The normalized distribution name a requirement string names (`Foo_Bar>=1; extra == 'x'` -> foo-bar)."""
    match = _REQ_NAME.match(requirement)
    return normalize(match.group(1)) if match else ""


def planned(report: Mapping[str, Any]) -> list[Planned]:
    """The distributions of pip's `--report` that it would install."""
    out = []
    for item in report.get("install") or []:
        meta = item.get("metadata") or {}
        out.append(
            Planned(str(meta.get("name", "")), str(meta.get("version", "")), tuple(meta.get("requires_dist") or ()))
        )
    return out


def installed_versions(site_dirs: Iterable[Path]) -> dict[str, str]:
    """Normalized name -> version of every distribution in these site-packages (from their folder names)."""
    out: dict[str, str] = {}
    for site in site_dirs:
        for dist_info in site.glob("*.dist-info"):
            name, _, version = dist_info.name.removesuffix(".dist-info").partition("-")
            out.setdefault(normalize(name), version)
    return out


def requirers(site_dirs: Iterable[Path], name: str) -> list[str]:
    """The distributions of these site-packages whose metadata requires `name` (`verifiers (datasets<4.7)`)."""
    out = []
    for site in site_dirs:
        for metadata in sorted(site.glob("*.dist-info/METADATA")):
            try:
                text = metadata.read_text(errors="replace")
            except OSError:
                continue
            for line in text.splitlines():
                if line.startswith("Requires-Dist:") and requirement_name(line.split(":", 1)[1]) == name:
                    owner = metadata.parent.name.removesuffix(".dist-info").partition("-")[0]
                    out.append(f"{owner} ({line.split(':', 1)[1].split(';')[0].strip()})")
                    break
    return out


def conflicts(plan: list[Planned], parent: Mapping[str, str], declared: Iterable[str], folder: str) -> list[Conflict]:
    """The planned distributions the parent venv already has at another version, each with the
    requirements that ask for it (the folder's own `dependencies`, or another planned distribution's)."""
    asks: dict[str, list[str]] = {}
    for requirement in declared:
        asks.setdefault(requirement_name(requirement), []).append(f"{requirement.strip()} (by {folder})")
    for dist in plan:
        for requirement in dist.requires:
            if "extra ==" not in requirement:
                asks.setdefault(requirement_name(requirement), []).append(f"{requirement.strip()} (by {dist.name})")
    out = []
    for dist in plan:
        have = parent.get(normalize(dist.name))
        if have is not None and have != dist.version:
            asked = tuple(dict.fromkeys(asks.get(normalize(dist.name), [])))
            out.append(Conflict(dist.name, dist.version, have, asked, ()))
    own = {requirement_name(r) for r in declared}  # the folder's own requirements first: the others follow from them
    return sorted(out, key=lambda c: normalize(c.name) not in own)


def pip_failure(stderr: str) -> str:
    """What a failed pip run says, short: the requirement the registry cannot meet, else its ERROR lines."""
    if match := _NOT_FOUND.search(stderr):
        return f"no version of {match.group(1)} on the registry meets it (pip: No matching distribution found)"
    errors = [e.strip() for e in _ERROR_LINE.findall(stderr)]
    lines = errors or [line for line in stderr.strip().splitlines() if not line.startswith("WARNING")][-8:]
    return "; ".join(lines) or "pip failed without a message"
