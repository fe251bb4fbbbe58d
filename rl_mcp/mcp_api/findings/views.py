"""The diagnosis findings as the answers carry them: rl_check_status's, rl_get_results' and the
notices sent to a run's subscribers."""

from __future__ import annotations

from rl_mcp.diagnosis import findings as diagnosis
from rl_mcp.mcp_api.findings.answers import Finding, FindingEvidence, FindingNextStep


def finding_view(f: diagnosis.Finding) -> Finding:
    return Finding(
        code=f.code,
        severity=f.severity,
        title=f.title,
        evidence=[
            FindingEvidence(metric=e.metric, steps=e.steps, values=e.values, summary=e.summary) for e in f.evidence
        ],
        next_step=FindingNextStep(tool=f.next_step.tool, arguments=f.next_step.arguments, why=f.next_step.why),
    )


def findings_view(found: list[diagnosis.Finding]) -> list[Finding]:
    return [finding_view(f) for f in found]
