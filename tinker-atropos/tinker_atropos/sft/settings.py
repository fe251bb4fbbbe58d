"""The `sft` section of an agent environment's config: a supervised stage on the run's LoRA adapter
before RL (edited with rl_edit_config like every other field; null: no supervised stage)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Source = Literal["demonstrations", "file", "teacher", "hermes_sessions"]


def _needs(source: str, field: str) -> dict[str, Any]:
    """Source `source` requires `field` (not null): said in the schema too, so an edit is refused at once."""
    return {
        "if": {"properties": {"sources": {"contains": {"const": source}}}, "required": ["sources"]},
        "then": {"required": [field], "properties": {field: {"not": {"type": "null"}}}},
    }


_SOURCES_NAMED = {
    "allOf": [_needs("file", "file"), _needs("teacher", "teacher"), _needs("hermes_sessions", "sessions_file")]
}
# a teacher is an endpoint (base_url and model) or an earlier run's adapter, never both
_ONE_TEACHER = {"oneOf": [{"required": ["base_url", "model"]}, {"required": ["adapter"]}]}


class TeacherSettings(BaseModel):
    """Rollouts of the environment by a stronger policy, kept where the environment's own reward passes."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_ONE_TEACHER)

    base_url: str | None = Field(
        default=None, pattern=r"^https?://\S+$", description="An OpenAI-compatible endpoint (e.g. https://host/v1)."
    )
    model: str | None = Field(default=None, min_length=1, description="The model at base_url.")
    api_key_var: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="NAME of the environment variable that holds base_url's key (never the key itself).",
    )
    adapter: str | None = Field(
        default=None,
        min_length=1,
        description="An earlier run's sampler weights folder (its rl_get_results final_weights), served here as the "
        "teacher: that run is distilled into this one.",
    )
    samples_per_item: int = Field(default=4, ge=1, le=64, description="Rollouts of each item by the teacher.")
    keep_per_item: int = Field(default=1, ge=1, description="The best this many passing rollouts of an item are kept.")
    temperature: float = Field(default=0.7, ge=0.0, description="The teacher's sampling temperature.")

    @model_validator(mode="after")
    def _one_teacher(self) -> TeacherSettings:
        if bool(self.adapter) == bool(self.base_url):
            raise ValueError("a teacher is either base_url (with model) or adapter")
        if self.base_url and not self.model:
            raise ValueError("a teacher at base_url needs `model`")
        return self


class SftSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_SOURCES_NAMED)

    sources: list[Source] = Field(
        default_factory=lambda: ["demonstrations"],
        min_length=1,
        description="Where examples come from: 'demonstrations' (the environment's demonstration(item), played "
        "through its real tools and kept where its reward reaches min_score), 'file' (a JSONL of conversations, "
        "OpenAI `messages` or ShareGPT `conversations`, rendered with this environment's tools) and 'teacher' "
        "(the environment played by a stronger model, kept where its reward reaches min_score with a "
        "well-formed tool call) and 'hermes_sessions' (your own Hermes sessions: the file `hermes sessions "
        "export FILE --format jsonl` writes, secrets redacted by Hermes' export rules, failed sessions left out).",
    )
    file: str | None = Field(default=None, description="The JSONL of conversations, for source 'file'.")
    teacher: TeacherSettings | None = Field(default=None, description="The teacher, for source 'teacher'.")
    sessions_file: str | None = Field(
        default=None,
        description="The file `hermes sessions export FILE --format jsonl` wrote (hermes-agent 0.19), for "
        "source 'hermes_sessions'.",
    )
    include_failed: bool = Field(
        default=False,
        description="Source 'hermes_sessions': also learn from sessions that failed in Hermes (an API error, a "
        "cut reply, the iteration limit), up to where they failed. Off: they are left out, each with why.",
    )
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
    def _sources_named(self) -> SftSettings:
        if "file" in self.sources and not self.file:
            raise ValueError("source 'file' needs `file`: the path of a JSONL of conversations")
        if "hermes_sessions" in self.sources and not self.sessions_file:
            raise ValueError(
                "source 'hermes_sessions' needs `sessions_file`: "
                "the path `hermes sessions export PATH --format jsonl` wrote"
            )
        if "teacher" in self.sources and self.teacher is None:
            raise ValueError("source 'teacher' needs `teacher`: {base_url, model, api_key_var} or {adapter}")
        return self

    def steps_for(self, examples: int) -> int:
        """The stage's length for this many examples: its epochs, capped by max_steps."""
        steps = self.epochs * math.ceil(examples / self.batch_size)
        return min(steps, self.max_steps) if self.max_steps else steps
