"""The diagnosis findings as the answers carry them (rl_check_status's, rl_get_results' and the notices
sent to a run's subscribers), read from the domain's findings by attribute (their base `Diagnosed`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from rl_mcp.diagnosis import findings as diagnosis


class FindingEvidence(BaseModel):
    metric: str = Field(description="The metrics.jsonl / eval.jsonl key (or log) the numbers come from")
    steps: list[int] = Field(description="The steps the values were read at")
    values: list[float | None] = Field(description="The values at those steps (null: not finite)")
    summary: str


class FindingNextStep(BaseModel):
    tool: str = Field(description="The tool to call (rl_edit_config, rl_test_inference, ...) or MCP method")
    arguments: dict[str, Any] = Field(description="Its arguments, ready to pass")
    why: str


class Finding(BaseModel):
    """A diagnosis of the run from its metrics (rl_mcp/diagnosis): what is wrong, the numbers, what to do."""

    code: str = Field(description="Stable name of the rule, e.g. groups_narrowing")
    severity: Literal["info", "warning", "error"]
    title: str
    evidence: list[FindingEvidence]
    next_step: FindingNextStep


class Diagnosed(BaseModel):
    """An answer about a run that carries its diagnosis (RunStatus, RunResults)."""

    findings: list[Finding] = Field(
        default_factory=list, description="Diagnosis of the run's metrics, the most severe first (empty: none)"
    )


def finding_view(f: diagnosis.Finding) -> Finding:
    return Finding.model_validate(f, from_attributes=True)  # its evidence and next step alike


def findings_view(found: list[diagnosis.Finding]) -> list[Finding]:
    return [finding_view(f) for f in found]
