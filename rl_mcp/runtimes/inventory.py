"""Which runtimes exist, their sizes and the command that makes each (doctor, rl://profile)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rl_mcp.distribution import command_line
from rl_mcp.runtimes import catalog
from rl_mcp.runtimes.maker import RECORD, is_made
from tinker_atropos.venvs import runtime_venv, server_trains


@dataclass(frozen=True)
class RuntimeState:
    name: str
    purpose: str
    made: bool
    path: str
    size_mb: int | None
    command: str
    note: str


def runtime_states(environ: Mapping[str, str]) -> list[RuntimeState]:
    return [_state(name, environ) for name in catalog.NAMES]


def _state(name: str, environ: Mapping[str, str]) -> RuntimeState:
    spec = catalog.spec(name)
    command = command_line("setup", name)
    if name == "training" and server_trains():
        return RuntimeState(name, spec.purpose, True, sys.prefix, None, command, "the server's own Python has it")
    venv = runtime_venv(name, environ)
    if not is_made(venv):
        return RuntimeState(name, spec.purpose, False, str(venv), None, command, f"made on first use ({spec.size})")
    record = _record(venv)
    size = record.get("bytes")
    note = f"made with {record.get('installer', '?')} in {record.get('seconds', '?')} s"
    mb = round(size / 1e6) if isinstance(size, int) else None
    return RuntimeState(name, spec.purpose, True, str(venv), mb, command, note)


def _record(venv: Path) -> dict[str, object]:
    try:
        found = json.loads((venv / RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
