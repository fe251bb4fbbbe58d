"""rl_test_inference's answer models (outputSchema + structuredContent): each model's result, a run's
weights beside its base model, the summary."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rl_mcp.mcp_api.env_health.answers import DiscardedGroups, RepliesAtCap


class InferenceSample(BaseModel):
    step: int = Field(description="The group (1-based) it came from")
    score: float
    prompt: str = Field(description="The last user turn (truncated; empty when not separable)")
    completion: str = Field(description="The model's reply (truncated)")


class ModelInferenceResult(BaseModel):
    model: str
    status: Literal["ok", "failed", "timeout", "discarded"] = Field(
        description="discarded: the environment discarded every group (returned none, raising nothing) until "
        "RL_MCP_ENV_DISCARD_GROUPS in a row or RL_MCP_ENV_DISCARD_TIMEOUT seconds; see `discarded`"
    )
    seconds: float
    steps_tested: int = Field(description="Groups scored (one per step)")
    completions: int
    correct: int = Field(description="Completions the environment marked correct (else: score > 0)")
    accuracy: float = Field(description="correct / completions")
    step_success_rate: float = Field(description="Share of steps with at least one correct completion")
    mean_score: float
    step_scores: list[list[float]] = Field(description="Scores per step (group), as the environment gave them")
    real_logprobs: bool = Field(description="The server returned per-token logprobs (what training needs)")
    samples: list[InferenceSample] = Field(description="The best- and the worst-scored completions")
    turns_per_rollout: float | None = Field(default=None, description="Agent environments: mean turns per rollout")
    tool_calls_per_rollout: float | None = Field(
        default=None, description="Agent environments: mean tool calls per rollout"
    )
    tool_errors: int | None = Field(
        default=None, description="Agent environments: malformed, unknown or failed tool calls, in all rollouts"
    )
    sample_trajectory: str | None = Field(
        default=None,
        description="Agent environments: the best-scored rollout as [USER] / [ASSISTANT] / [TOOL CALL] name(args) "
        "/ [TOOL RESULT] blocks, each cut to a readable length; [TEXT ACTION] {field: reply}: a reply sent whole as "
        "the action (OpenEnv's action_mode text), the environment's answer the next [USER]",
    )
    reward_reasons: list[str] | None = Field(
        default=None,
        description="Each rollout's score and the reward's one-line reason, where the environment gives one "
        "(mcp tool servers: the check's or the judge's)",
    )
    output_jsonl: str | None = Field(description="The scored groups atroposlib wrote")
    output_html: str | None = Field(description="The same groups rendered for reading")
    log: str = Field(description="The environment process's log")
    warnings: list[str] = Field(
        default_factory=list,
        description="What the environment process warned a user must know, e.g. that its tools ran unsandboxed and why",
    )
    server_log: str | None = Field(description="The local inference server's log (local target only)")
    config: str = Field(description="The YAML the process ran with (never holds a key)")
    discarded: DiscardedGroups | None = Field(
        default=None, description="The groups the environment discarded, with sample replies and scores (none: null)"
    )
    replies_at_cap: RepliesAtCap | None = Field(
        default=None, description="Replies cut at their token cap or the model's context, and the field that caps them"
    )
    error: str | None
    log_tail: list[str] = Field(description="Last log lines, on failure")


class RunComparison(BaseModel):
    """rl_test_inference with run_id: the run's weights beside its base model, on the same items."""

    run_id: str
    checkpoint: str = Field(description="The checkpoint tested (step-N or final)")
    checkpoint_step: int | None
    weights: str = Field(description="Its path: an adapter folder, or a tinker:// sampler path")
    base_model: str
    base_accuracy: float | None
    trained_accuracy: float | None
    accuracy_delta: float | None = Field(description="trained - base, when both ran")
    base_mean_score: float | None
    trained_mean_score: float | None


class InferenceTestResult(BaseModel):
    environment: str
    target: Literal["openrouter", "openai_compatible", "local"] = Field(
        description="openrouter (OPENROUTER_API_KEY set), openai_compatible (base_url), local (this machine)"
    )
    base_url: str | None = Field(description="The endpoint tested; null for the local server (one per model)")
    key_env: str | None = Field(description="The NAME of the environment variable whose key was used")
    num_steps: int
    group_size: int
    results: list[ModelInferenceResult]
    best_model: str | None = Field(description="Highest accuracy (then mean score) among models that ran")
    mean_accuracy: float | None = Field(description="Over the models that ran")
    environment_working: bool = Field(description="At least one model ran the environment end to end")
    run_comparison: RunComparison | None = Field(
        default=None, description="With run_id: the run's trained weights against its base model"
    )
    output_dir: str
    next_step: str
