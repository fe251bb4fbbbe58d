"""rl_test_inference's answer: each model's scored groups, its discarded groups and replies at their cap,
the comparison of a run's weights with the base, read from the domain's outcomes by attribute."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from rl_mcp.from_domain import answer_from
from rl_mcp.inference.run_weights import RunCheckpoint
from rl_mcp.inference.runner import ModelOutcome
from rl_mcp.inference.target import InferenceRequest, Target
from rl_mcp.runs.health_answers import DiscardedGroups, RepliesAtCap, at_cap_view, discarded_view
from tinker_atropos.run_files import InferenceTestFiles


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


NEXT_INFERENCE_WORKING = (
    "The environment works: rl_start_training to train on it. Read samples / output_html "
    "to check the rewards make sense; all-equal scores in a group give no learning signal."
)


NEXT_INFERENCE_NO_TOOL_CALLS = (
    "The environment runs, but no rollout made a tool call: RL alone cannot teach the call (every rollout "
    "scores the same). Set a supervised stage first: rl_edit_config(field='sft', value={'sources': "
    "['demonstrations']}) (or 'file' with a JSONL of conversations that call its tools), rl_preview_sft to "
    "see its examples, then rl_start_training."
)


NEXT_INFERENCE_DISCARDED = (
    "The environment discarded every group: its rollouts returned no group and raised nothing, so a "
    "run would never get a batch. Read each model's `discarded` (sample replies, scores, the likely "
    "cause): equal scores call for more varied replies (a higher temperature, a larger group_size) or "
    "items the model sometimes gets right; replies too short or unparsable call for a fix in the "
    "environment or its prompt. Then rl_test_inference again."
)


NEXT_INFERENCE_BROKEN = (
    "Nothing ran end to end: read each model's error and log_tail, fix the environment "
    "(rl://environments/{name} shows its source) or the endpoint, then call rl_test_inference again."
)


def inference_answer(
    req: InferenceRequest,
    target: Target,
    outcomes: list[ModelOutcome],
    run: tuple[str, RunCheckpoint] | None = None,
) -> InferenceTestResult:
    """`run` (run id, checkpoint): the target is that run's base model, then its trained weights."""
    results = [_model_result(o) for o in outcomes]
    ran = [r for r in results if r.status == "ok"]
    best = max(ran, key=lambda r: (r.accuracy, r.mean_score), default=None)
    working = bool(ran)
    if working and all(r.tool_calls_per_rollout == 0 for r in ran):
        next_step = NEXT_INFERENCE_NO_TOOL_CALLS
    elif working:
        next_step = NEXT_INFERENCE_WORKING
    elif any(r.status == "discarded" for r in results):
        next_step = NEXT_INFERENCE_DISCARDED
    else:
        next_step = NEXT_INFERENCE_BROKEN
    return answer_from(
        InferenceTestResult,
        req,  # its steps and group size
        target,  # its URL and key variable
        environment=req.env_name,
        target=target.kind,
        results=results,
        best_model=best.model if best else None,
        mean_accuracy=round(sum(r.accuracy for r in ran) / len(ran), 4) if ran else None,
        environment_working=working,
        run_comparison=_comparison(run, target, results) if run else None,
        output_dir=str(req.out_dir),
        next_step=next_step,
    )


# What a model that scored nothing answers (it failed, timed out or had every group discarded).
UNSCORED = {
    "steps_tested": 0,
    "completions": 0,
    "correct": 0,
    "accuracy": 0.0,
    "step_success_rate": 0.0,
    "mean_score": 0.0,
    "step_scores": [],
    "real_logprobs": False,
    "samples": [],
}


def _model_result(o: ModelOutcome) -> ModelInferenceResult:
    """The outcome's, its scores' and its agent counts' fields by name; rounded, and paths as text."""
    s = o.scores
    agent = s.agent if s else None
    scored = (
        {
            "accuracy": round(s.accuracy, 4),
            "step_success_rate": round(s.step_success_rate, 4),
            "mean_score": round(s.mean_score, 4),
            "real_logprobs": s.has_logprobs,
        }
        if s
        else UNSCORED
    )
    return answer_from(
        ModelInferenceResult,
        o,
        s,
        agent,
        **scored,
        reward_reasons=agent.reasons if agent and agent.reasons else None,
        output_jsonl=str(o.jsonl) if o.jsonl else None,
        output_html=str(o.html) if o.html else None,
        log=str(o.log),
        server_log=str(o.server_log) if o.server_log else None,
        config=str(InferenceTestFiles(o.output_dir).config),
        discarded=discarded_view(o.health.discards if o.health else None),
        replies_at_cap=at_cap_view(o.at_cap, o.health.requests if o.health else None),
    )


def _comparison(run: tuple[str, RunCheckpoint], target: Target, results: list[ModelInferenceResult]) -> RunComparison:
    run_id, checkpoint = run
    base, trained = (next(r for r in results if r.model == m) for m in target.models)

    def ran(r: ModelInferenceResult, value: float) -> float | None:
        return value if r.status == "ok" else None

    base_acc, trained_acc = ran(base, base.accuracy), ran(trained, trained.accuracy)
    return RunComparison(
        run_id=run_id,
        checkpoint=checkpoint.name,
        checkpoint_step=checkpoint.step,
        weights=checkpoint.path,
        base_model=target.local_weights(trained.model).base_model,
        base_accuracy=base_acc,
        trained_accuracy=trained_acc,
        accuracy_delta=None if base_acc is None or trained_acc is None else round(trained_acc - base_acc, 4),
        base_mean_score=ran(base, base.mean_score),
        trained_mean_score=ran(trained, trained.mean_score),
    )
