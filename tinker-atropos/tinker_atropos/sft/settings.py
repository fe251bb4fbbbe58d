"""The `sft` section of an agent environment's config: a supervised stage on the run's LoRA adapter
before RL (edited with rl_edit_config like every other field; null: no supervised stage)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Source = Literal["demonstrations", "file"]


# `file` is required with source 'file': said in the schema too, so an edit is refused before any run
_FILE_NAMED = {
    "if": {"properties": {"sources": {"contains": {"const": "file"}}}, "required": ["sources"]},
    "then": {"required": ["file"], "properties": {"file": {"type": "string", "minLength": 1}}},
}


class SftSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_FILE_NAMED)

    sources: list[Source] = Field(
        default_factory=lambda: ["demonstrations"],
        min_length=1,
        description="Where examples come from: 'demonstrations' (the environment's demonstration(item), played "
        "through its real tools and kept where its reward reaches min_score) and 'file' (a JSONL of conversations, "
        "OpenAI `messages` or ShareGPT `conversations`, rendered with this environment's tools).",
    )
    file: str | None = Field(default=None, description="The JSONL of conversations, for source 'file'.")
    items: int = Field(default=64, ge=1, description="Training items to demonstrate (source 'demonstrations').")
    min_score: float = Field(default=1.0, description="A demonstration is kept when its reward reaches this.")
    epochs: int = Field(default=3, ge=1, description="Passes over the examples, unless max_steps comes first.")
    max_steps: int | None = Field(default=None, ge=1, description="At most this many supervised steps.")
    batch_size: int = Field(default=8, ge=1, description="Examples per supervised step.")
    learning_rate: float = Field(default=2.0e-4, gt=0, description="Adam's learning rate during the stage.")
    eval_every: int = Field(
        default=0, ge=0, description="Held-out evaluation every this many steps (0: before and after the stage only)."
    )
    stop_at_tool_call_share: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="End the stage early once the held-out share of rollouts with a well-formed tool call "
        "reaches this (checked at each evaluation).",
    )
    then: Literal["rl", "stop"] = Field(default="rl", description="After the stage: go on to RL, or end the run.")

    @model_validator(mode="after")
    def _file_named(self) -> SftSettings:
        if "file" in self.sources and not self.file:
            raise ValueError("source 'file' needs `file`: the path of a JSONL of conversations")
        return self

    def steps_for(self, examples: int) -> int:
        """The stage's length for this many examples: its epochs, capped by max_steps."""
        steps = self.epochs * math.ceil(examples / self.batch_size)
        return min(steps, self.max_steps) if self.max_steps else steps
