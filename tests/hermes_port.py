"""A Hermes environment ported as docs/agentic-environments.md tells a user: the modules of its import
lines swapped by the docs' table, nothing else. Shared by tests/agent/test_hermes_port.py (which runs
the port) and tests/test_finding_edits.py (which selects it as a user's environment); imported by
name (tests/ is on sys.path)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ORIGINAL = ROOT / "tests" / "byo_envs" / "hermes" / "notes_env.py"
DOCS = ROOT / "docs" / "agentic-environments.md"


def module_table() -> dict[str, str]:
    """Hermes module -> ours, from the porting table of the docs (what a user follows)."""
    rows = re.findall(
        r"^\| `((?:environments|tools)\.[\w.]+)` \| `(tinker_atropos\.[\w.]+)` \|", DOCS.read_text(), re.M
    )
    assert rows, "docs/agentic-environments.md lost its porting table"
    return dict(rows)


def port(source: str) -> str:
    table = module_table()

    def swap(line: str) -> str:
        m = re.match(r"from ([\w.]+) import ", line)
        return line.replace(m.group(1), table[m.group(1)], 1) if m and m.group(1) in table else line

    return "\n".join(swap(line) for line in source.split("\n"))
