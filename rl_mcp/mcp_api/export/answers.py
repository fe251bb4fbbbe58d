"""rl_export_model's answer models (outputSchema + structuredContent)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


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
