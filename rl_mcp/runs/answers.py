"""The run tools' answer models (outputSchema + structuredContent): a start, a status, results, a stop
and the list of runs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from rl_mcp.diagnosis.answers import Diagnosed
from rl_mcp.runs import vocab
from rl_mcp.runs.health_answers import EnvRequests, TrainingItems
from tinker_atropos.run_files import ProcessName

ITEMS_DESCRIPTION = (
    "The training items: active, retired as solved, deferred as unsolved, and the groups that tied (null "
    "before the first group)"
)


class RunProcess(BaseModel):
    name: ProcessName = Field(description="run-api, the trainer, or the environment")
    pid: int
    state: Literal["running", "exited"]
    exit_code: int | None = Field(description="None while running; -1 when it exited outside this server's view")
    log: str = Field(description="Its log file (also the resource rl://runs/{id}/logs/{name})")


class Lineage(BaseModel):
    """Where a resumed or forked run started."""

    parent_run_id: str = Field(description="The run whose saved training state this run started from")
    step: int = Field(description="The parent's step of that state: this run's first step is step + 1")
    kind: Literal["resume", "fork"] = Field(
        description="resume: the parent's own config and W&B run; fork: the session's config, a new W&B run"
    )


class TrainingStateView(BaseModel):
    step: int = Field(description="Steps done when it was saved: pass as checkpoint_step to resume from it")
    path: str = Field(description="Adapter + optimizer state: a local folder or a tinker:// path")


class RunSummary(BaseModel):
    run_id: str
    environment: str
    profile: str
    status: vocab.RunStatus
    stage: vocab.Stage | None = Field(description="The start stage in progress, or the one that failed")
    step: int = Field(description="Completed training steps")
    total_steps: int
    created_at: str = Field(description="UTC, ISO 8601")
    ended_at: str | None
    error: str | None
    resumed_from: Lineage | None = Field(default=None, description="Set when resumed or forked from another run")


class RunList(BaseModel):
    runs: list[RunSummary] = Field(description="Newest first, from every server lifetime")
    next_step: str


class CostEstimate(BaseModel):
    """What a run on a paid backend may spend, from its config (an upper bound: full-length sequences)."""

    backend: str
    model: str
    total_steps: int
    batch_size: int = Field(description="Sequences per training step")
    group_size: int
    max_token_length: int
    max_tokens: int = Field(description="Token budget: total_steps x batch_size x max_token_length")
    usd_per_million_tokens: float | None = Field(description="The operator's price (profile `pricing`), if set")
    estimated_usd: float | None = Field(description="max_tokens x price, when the profile gives a price")
    confirmed: Literal["elicitation", "not_asked"] = Field(
        description="elicitation: the user confirmed it in the client; not_asked: the client cannot be asked"
    )


class RunStarted(BaseModel):
    run_id: str
    status: vocab.RunStatus = Field(description="starting: the start continues in the background")
    stage: vocab.Stage | None
    environment: str
    profile: str
    config_path: str = Field(description="The run config (never holds a secret)")
    run_dir: str
    logs: dict[str, str] = Field(description="Log file per process: api, trainer, env")
    ports: dict[str, int] = Field(description="This run's run-api and inference server ports")
    error: str | None = Field(default=None, description="Why the start failed (only with wait=true)")
    wandb_project: str | None = Field(default=None, description="The run's W&B project (as in Hermes' RL tool)")
    wandb_run_name: str | None = Field(default=None, description="The run's W&B run name (as in Hermes' RL tool)")
    cost_estimate: CostEstimate | None = Field(
        default=None, description="Paid backends (tinker profile): the run's token budget and estimated cost"
    )
    resumed_from: Lineage | None = Field(default=None, description="Set when resumed or forked from another run")
    next_step: str


class LatestMetrics(BaseModel):
    step: int | None
    loss: float | None
    reward_mean: float | None
    reward_std: float | None
    percent_correct: float | None = Field(description="None when the environment does not report it")
    eval_accuracy: float | None = Field(
        description="The held-out set's newest accuracy: before the first step, then at the end (or every "
        "steps_per_eval steps where the environment has no validation set)"
    )
    eval_step: int | None
    validation_accuracy: float | None = Field(
        default=None, description="The validation set's newest accuracy (every steps_per_eval steps)"
    )
    validation_step: int | None = None
    no_signal_share: float | None = Field(
        default=None, description="Share of the step's groups whose replies all scored the same (no learning signal)"
    )
    distinct_reply_share: float | None = Field(
        default=None, description="Distinct replies per group / group size (near 1/group_size: collapsed)"
    )
    sampler_mismatch: float | None = Field(
        default=None,
        description="Sampler vllm: mean |trainer - vLLM logprob| per reply token on the same weights (bfloat16 "
        "kernels against the trainer's; importance ratios absorb a few hundredths)",
    )
    teacher_kl: float | None = Field(
        default=None,
        description="trainer.teacher: the student's logprob less the teacher's per reply token, on the student's "
        "own samples (the reverse KL to the teacher): it falls as the student learns to sample like the teacher",
    )
    teacher_logprob: float | None = Field(
        default=None, description="trainer.teacher: the teacher's mean logprob of the student's reply tokens"
    )
    agent_turns_mean: float | None = Field(default=None, description="Agent environments: turns per rollout")
    agent_tool_calls_mean: float | None = Field(default=None, description="Agent environments: tool calls per rollout")
    agent_tool_errors: int | None = Field(
        default=None, description="Agent environments: malformed or failed tool calls in the step"
    )


class SftEval(BaseModel):
    sft_step: int = Field(description="0: the model before the stage")
    eval_accuracy: float | None
    eval_tool_call_share: float | None = Field(description="Held-out rollouts with a well-formed tool call")


class SftStage(BaseModel):
    """The supervised stage before RL (the environment's `sft` section)."""

    step: int
    total_steps: int
    loss: float | None = Field(description="Cross-entropy per trained token, latest step")
    first_loss: float | None
    examples: int | None = Field(description="Supervised examples it trains on")
    counts: dict[str, dict[str, int]] = Field(description="Per source: examples kept and refused")
    evals: list[SftEval] = Field(description="Held-out evaluations during the stage, the first before any step")
    ended: str | None = Field(description="budget | tool_call_share | stopped; null while it runs")


class RolloutError(BaseModel):
    """The environment's latest exception in a rollout (its collect_trajectories)."""

    type: str = Field(description="The exception's type, e.g. KeyError")
    message: str
    where: str = Field(description="file:line in function, the innermost frame of the environment's own code")
    at: str = Field(description="When it was raised (UTC, ISO 8601)")
    errors: int = Field(description="Rollouts that raised so far")
    groups_scored: int = Field(description="Groups the environment scored so far")


class RunStatus(Diagnosed):
    run_id: str
    environment: str | None = Field(default=None, description="The environment the run trains")
    rate_limited: bool = Field(description="True: this call was too soon after the last one and checked nothing")
    next_check_in_seconds: float = Field(description="Wait at least this long before checking this run again")
    status: vocab.RunStatus
    stage: vocab.Stage | None = None
    error: str | None = None
    failure_log_tail: list[str] | None = Field(default=None, description="Last lines of the failing process's log")
    step: int | None = None
    total_steps: int | None = None
    running_seconds: float | None = None
    eta_seconds: float | None = None
    latest: LatestMetrics | None = None
    sft: SftStage | None = Field(default=None, description="The supervised stage before RL, when the run has one")
    processes: list[RunProcess] = Field(default_factory=list)
    environment_error: RolloutError | None = Field(
        default=None, description="The environment's latest exception in a rollout, if any rollout raised"
    )
    environment_requests: EnvRequests | None = Field(
        default=None, description="The environment's model requests: timeouts and retries, replies cut at their cap"
    )
    items: TrainingItems | None = Field(default=None, description=ITEMS_DESCRIPTION)
    logs: dict[str, list[str]] = Field(default_factory=dict, description="Last lines of each process's log")
    wandb_url: str | None = None
    wandb_project: str | None = Field(default=None, description="The run's W&B project (as in Hermes' RL tool)")
    wandb_run_name: str | None = Field(default=None, description="The run's W&B run name (as in Hermes' RL tool)")
    next_step: str


class HistoryPoint(BaseModel):
    step: int
    reward_mean: float | None
    reward_std: float | None
    loss: float | None
    percent_correct: float | None


class CheckpointScoresView(BaseModel):
    step: int
    weights: str = Field(description="The sampler weights' name in checkpoints (step-000030)")
    validation_accuracy: float | None
    held_out_accuracy: float | None = Field(description="None where the held-out set has not scored these weights")


class CheckpointChoiceView(BaseModel):
    best: CheckpointScoresView | None
    last: CheckpointScoresView | None
    handed_out: Literal["best", "last"] = Field(description="What final_weights and rl_export_model's default are")
    summary: str


class RunResults(Diagnosed):
    run_id: str
    status: vocab.RunStatus
    environment: str
    backend: str | None
    steps_completed: int
    total_steps: int
    final_metrics: LatestMetrics | None
    sft: SftStage | None = Field(default=None, description="The supervised stage before RL, when the run has one")
    history: list[HistoryPoint] = Field(description="Per-step metrics, evenly downsampled for long runs")
    history_total_steps: int = Field(description="Steps recorded before downsampling")
    evals: list[dict[str, Any]] = Field(description="eval.jsonl rows (step, eval_accuracy, ...)")
    eval_summary: str | None = Field(
        default=None,
        description="The held-out eval before -> after training (step 0 is before the first update), and the best",
    )
    validation: list[dict[str, Any]] = Field(
        default_factory=list, description="validation.jsonl rows (step, eval_accuracy, weights, ...)"
    )
    checkpoint_choice: CheckpointChoiceView | None = Field(
        default=None,
        description="The best checkpoint by validation and the last one, each with its validation and held-out "
        "accuracy, and which of them results and rl_export_model use (keep_best); None without a validation set",
    )
    checkpoints: list[dict[str, Any]] = Field(description="Saved sampler weights and states, oldest first")
    final_weights: str | None = Field(description="Final sampler weights: tinker:// path or local adapter folder")
    final_weights_exists: bool | None = Field(description="For local folders: whether it is on disk")
    final_state: str | None = Field(description="Adapter + optimizer state for resuming")
    training_states: list[TrainingStateView] = Field(
        default_factory=list,
        description="Saved training states, oldest first: rl_start_training(resume_from=run_id, checkpoint_step=step)",
    )
    resumed_from: Lineage | None = Field(
        default=None, description="Set when resumed or forked: history covers the parent's steps up to its state too"
    )
    wandb_url: str | None
    wandb: dict[str, Any] | None = Field(description="W&B run summary when WANDB_API_KEY is set")
    wandb_offline_dir: str | None = Field(description="Offline W&B files: sync later with `wandb sync <dir>`")
    wandb_project: str | None = Field(default=None, description="The run's W&B project (as in Hermes' RL tool)")
    wandb_run_name: str | None = Field(default=None, description="The run's W&B run name (as in Hermes' RL tool)")
    items: TrainingItems | None = Field(default=None, description=ITEMS_DESCRIPTION)
    error: str | None
    reason: str | None = Field(default=None, description="Why the run completed before total_steps, if it did")
    next_step: str


class RunStopped(BaseModel):
    run_id: str
    status: vocab.RunStatus
    was: vocab.RunStatus = Field(description="The status before this call")
    processes: list[RunProcess]
    message: str
