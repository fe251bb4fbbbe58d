"""rl_preview_sft's answer: the supervised set's examples, their spans and the refusals, read from the
built set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field


class SftSpan(BaseModel):
    trained: bool = Field(
        description="True: the policy learns to write this text (its own turns, end of turn included)"
    )
    text: str


class SftExampleView(BaseModel):
    source: str = Field(description="demonstrations | file | teacher | hermes_sessions")
    origin: str = Field(description="Where it came from: 'item 3', 'line 12'")
    spans: list[SftSpan] = Field(description="The example as the model reads it, cut where training starts and stops")


class SftRefusal(BaseModel):
    source: str
    origin: str
    reason: str


class HermesSessionsLeftOut(BaseModel):
    session: str
    reason: str


class HermesSessionsView(BaseModel):
    """Source hermes_sessions: what the export file held and what became of it."""

    file: str
    sessions: int = Field(description="Sessions in the file")
    kept: int = Field(description="Examples made from them")
    failed_left_out: int = Field(description="Sessions that failed in Hermes, left out (include_failed: false)")
    failed_included: int = Field(description="Failed sessions learned up to where they failed (include_failed: true)")
    refused: int = Field(description="Sessions that cannot be this environment's conversations (tools, turns)")
    include_failed: bool
    redacted_texts: int = Field(
        description="Texts (a message, a call's arguments) where Hermes' own export rules masked a secret, before "
        "anything read them"
    )
    left_out: list[HermesSessionsLeftOut] = Field(description="The first sessions left out, each with why")


class SftPreview(BaseModel):
    environment: str
    counts: dict[str, dict[str, int]] = Field(description="Per source: examples kept and refused")
    examples: int
    tokens: int = Field(description="Tokens of all examples")
    trained_tokens: int = Field(description="Of those, the policy's own (weight 1 in the loss)")
    refused: list[SftRefusal] = Field(description="The first refusals, each with why")
    example: SftExampleView | None = Field(description="One kept example rendered with its mask")
    hermes_sessions: HermesSessionsView | None = Field(
        default=None, description="Source hermes_sessions: the export's sessions kept, failed, refused and redacted"
    )
    steps: int | None = Field(
        description="The stage's supervised steps (epochs over the examples, capped by max_steps)"
    )
    seconds_per_step: float | None = Field(description="One step timed on this machine (local backend)")
    estimated_seconds: float | None = Field(description="steps x seconds_per_step, evaluations not included")
    estimate: str | None = Field(description="How the time was estimated, or why it was not")
    error: str | None = Field(description="Why no example is left, when none is")
    folder: str = Field(description="The preview's folder: its config, log and the stage's sft/ files")
    next_step: str


def next_after_preview(examples: int, steps: int | None, estimated_s: float | None) -> str:
    if examples == 0:
        return (
            "No example is left: read `refused` for why, fix the section (min_score, the file, its tools) with "
            "rl_edit_config(field='sft', ...), and preview again."
        )
    when = f", about {estimated_s / 60:.0f} min of training" if estimated_s else ""
    return (
        f"{examples} examples, {steps} steps{when}. rl_start_training runs the stage, then RL on the same adapter "
        "(`then: 'stop'` in the section ends the run after it); rl_check_status shows its step, loss and "
        "held-out evaluations."
    )


def preview_answer(environment: str, folder: Path, summary: dict[str, Any]) -> SftPreview:
    example = summary.get("example")
    steps, per_step = summary.get("steps"), summary.get("seconds_per_step")
    estimated = round(steps * per_step, 1) if steps and per_step else None
    examples = int(summary.get("examples") or 0)
    sessions = summary.get("hermes_sessions")
    return SftPreview(
        environment=environment,
        counts=summary.get("counts") or {},
        examples=examples,
        tokens=int(summary.get("tokens") or 0),
        trained_tokens=int(summary.get("trained_tokens") or 0),
        refused=[SftRefusal(**r) for r in summary.get("refused") or []],
        example=None
        if not example
        else SftExampleView(
            source=example["source"], origin=example["origin"], spans=[SftSpan(**s) for s in example["spans"]]
        ),
        hermes_sessions=HermesSessionsView.model_validate(sessions) if sessions else None,
        steps=steps,
        seconds_per_step=per_step,
        estimated_seconds=estimated,
        estimate=summary.get("estimate"),
        error=summary.get("error"),
        folder=str(folder),
        next_step=next_after_preview(examples, steps, estimated),
    )
