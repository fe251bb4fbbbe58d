"""What a diagnosis finds: a finding, its evidence and the one next step that addresses it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["info", "warning", "error"]
SEVERITY_RANK: dict[Severity, int] = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Evidence:
    """The numbers behind a finding: one metric over the steps it was read at."""

    metric: str
    steps: list[int]
    values: list[float | None]
    summary: str


@dataclass(frozen=True)
class NextStep:
    """A tool call (or MCP method) with its arguments, and why it addresses the finding."""

    tool: str
    arguments: dict[str, Any]
    why: str

    @property
    def call(self) -> str:
        """The call as an agent writes it: rl_edit_config(field='group_size', value=16)."""
        return f"{self.tool}({', '.join(f'{k}={v!r}' for k, v in self.arguments.items())})"


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    title: str
    next_step: NextStep
    evidence: list[Evidence] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return SEVERITY_RANK[self.severity]
