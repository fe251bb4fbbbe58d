"""The rl_export_model answer, built from the export's outcome (the tool's and `mcp-server-rl export`'s)."""

from __future__ import annotations

from rl_mcp.export.runner import ExportOutcome
from rl_mcp.mcp_api.export import descriptions
from rl_mcp.mcp_api.export.answers import ExportCheck, ExportedFile, ExportResult
from rl_mcp.mcp_api.from_domain import answer_from


def export_answer(outcome: ExportOutcome) -> ExportResult:
    plan = outcome.plan
    files = [ExportedFile.model_validate(f) for f in outcome.files]
    return answer_from(
        ExportResult,
        outcome,  # its load command and hub url
        plan,  # its run, format and why this checkpoint
        checkpoint=plan.checkpoint.name,
        checkpoint_step=plan.checkpoint.step,
        dtype=None if plan.format == "adapter" else outcome.dtype,
        folder=str(plan.out),
        files=files,
        total_bytes=sum(f.bytes for f in files),
        check=ExportCheck.model_validate(outcome.verification),
        model_card=str(outcome.card),
        next_step=descriptions.next_after_export(plan.format, outcome.hub_url),
    )
