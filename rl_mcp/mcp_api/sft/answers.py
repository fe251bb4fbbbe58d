"""rl_preview_sft's answer models."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SftSpan(BaseModel):
    trained: bool = Field(
        description="True: the policy learns to write this text (its own turns, end of turn included)"
    )
    text: str


class SftExampleView(BaseModel):
    source: str = Field(description="demonstrations | file")
    origin: str = Field(description="Where it came from: 'item 3', 'line 12'")
    spans: list[SftSpan] = Field(description="The example as the model reads it, cut where training starts and stops")


class SftRefusal(BaseModel):
    source: str
    origin: str
    reason: str


class SftPreview(BaseModel):
    environment: str
    counts: dict[str, dict[str, int]] = Field(description="Per source: examples kept and refused")
    examples: int
    tokens: int = Field(description="Tokens of all examples")
    trained_tokens: int = Field(description="Of those, the policy's own (weight 1 in the loss)")
    refused: list[SftRefusal] = Field(description="The first refusals, each with why")
    example: SftExampleView | None = Field(description="One kept example rendered with its mask")
    steps: int | None = Field(
        description="The stage's supervised steps (epochs over the examples, capped by max_steps)"
    )
    seconds_per_step: float | None = Field(description="One step timed on this machine (local backend)")
    estimated_seconds: float | None = Field(description="steps x seconds_per_step, evaluations not included")
    estimate: str | None = Field(description="How the time was estimated, or why it was not")
    error: str | None = Field(description="Why no example is left, when none is")
    folder: str = Field(description="The preview's folder: its config, log and the stage's sft/ files")
    next_step: str
