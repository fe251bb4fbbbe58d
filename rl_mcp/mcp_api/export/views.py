"""The rl_export_model answer, built from the export's outcome (the tool's and `mcp-server-rl export`'s)."""

from __future__ import annotations

from rl_mcp.export.runner import ExportOutcome
from rl_mcp.mcp_api.export import descriptions
from rl_mcp.mcp_api.export.answers import ExportCheck, ExportedFile, ExportResult


def export_answer(outcome: ExportOutcome) -> ExportResult:
    plan = outcome.plan
    files = [ExportedFile(path=f["path"], bytes=f["bytes"]) for f in outcome.files]
    v = outcome.verification
    return ExportResult(
        run_id=plan.run_id,
        checkpoint=plan.checkpoint.name,
        checkpoint_step=plan.checkpoint.step,
        chosen_because=plan.chosen_because,
        format=plan.format,
        dtype=None if plan.format == "adapter" else outcome.dtype,
        folder=str(plan.out),
        files=files,
        total_bytes=sum(f.bytes for f in files),
        load_command=outcome.load_command,
        check=ExportCheck(prompts=v["prompts"], matches=v["matches"], required=v["required"]),
        model_card=str(outcome.card),
        hub_url=outcome.hub_url,
        next_step=descriptions.next_after_export(plan.format, outcome.hub_url),
    )
