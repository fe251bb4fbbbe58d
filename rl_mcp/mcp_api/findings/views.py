"""The diagnosis findings as the answers carry them: rl_check_status's, rl_get_results' and the
notices sent to a run's subscribers."""

from __future__ import annotations

from rl_mcp.diagnosis import findings as diagnosis
from rl_mcp.mcp_api.findings.answers import Finding


def finding_view(f: diagnosis.Finding) -> Finding:
    return Finding.model_validate(f, from_attributes=True)  # its evidence and next step alike


def findings_view(found: list[diagnosis.Finding]) -> list[Finding]:
    return [finding_view(f) for f in found]
