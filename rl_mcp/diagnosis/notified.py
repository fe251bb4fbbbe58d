"""Which findings a run's subscribed clients were told of, kept in the run folder so that a
restarted server does not tell them again."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rl_mcp.diagnosis.findings import Finding
from tinker_atropos.run_files import atomic_write_text


def _read(path: Path) -> dict[str, Any]:
    """code -> what was sent ({} for a missing or unreadable file: at worst a finding is sent again)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    sent = data.get("sent") if isinstance(data, dict) else None
    return sent if isinstance(sent, dict) else {}


def sent_codes(path: Path) -> set[str]:
    return set(_read(path))


def record_sent(path: Path, findings: list[Finding]) -> None:
    """Add `findings` to the file: {"sent": {code: {"severity", "title", "at"}}}."""
    sent = _read(path)
    sent.update({f.code: {"severity": f.severity, "title": f.title, "at": time.time()} for f in findings})
    atomic_write_text(path, json.dumps({"sent": sent}, indent=1))
