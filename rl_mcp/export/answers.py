"""rl_export_model's answer: the files written, the checks run, the Hub's address, read from the export's
outcome and plan by attribute."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rl_mcp.export.runner import ExportOutcome
from rl_mcp.from_domain import answer_from


class ExportedFile(BaseModel):
    path: str
    bytes: int


class ExportCheck(BaseModel):
    prompts: int = Field(description="The environment's prompts the export was checked on")
    matches: int = Field(description="Prompts whose greedy reply equals the trained policy's")
    required: int = Field(description="Matches needed: all for adapter and merged float32, half for lossy dtypes")


class ExportResult(BaseModel):
    run_id: str
    checkpoint: str = Field(description="The checkpoint exported (step-NNNNNN or final)")
    checkpoint_step: int | None
    chosen_because: str = Field(description="Why this checkpoint: as asked, final, or best by validation (keep_best)")
    format: Literal["adapter", "merged", "gguf"]
    dtype: str | None
    folder: str
    files: list[ExportedFile]
    total_bytes: int
    load_command: str = Field(description="How to load the export")
    check: ExportCheck
    model_card: str = Field(description="README.md in the folder: base model, environment, evals, curve, license")
    hub_url: str | None = Field(description="Where the folder was pushed (hub_repo), else null")
    next_step: str


def next_after_export(fmt: str, hub_url: str | None) -> str:
    pushed = f" It is on the Hub at {hub_url}." if hub_url else ""
    other = {
        "adapter": "'merged' or 'gguf'",
        "merged": "'gguf' (Ollama, llama.cpp)",
        "gguf": "'merged' (transformers)",
    }[fmt]
    return (
        f"Load it with load_command; README.md in the folder is its model card.{pushed} Export format={other} for "
        "other programs, or hub_repo='you/name' (needs HF_TOKEN) to publish it."
    )


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
        next_step=next_after_export(plan.format, outcome.hub_url),
    )
