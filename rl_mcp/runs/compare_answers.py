"""rl_compare_runs' answer (outputSchema + structuredContent, and `mcp-server-rl compare --json`'s): each run's
figures, the config fields that differ, the best runs, read from the domain's comparison by attribute."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from rl_mcp.from_domain import answer_from
from rl_mcp.runs import vocab
from rl_mcp.runs.compare import Comparison


class ComparedRun(BaseModel):
    run_id: str
    environment: str
    status: vocab.RunStatus
    steps_completed: int
    total_steps: int
    reward_first: float | None = Field(description="Mean reward of the first step (the untrained policy's rollouts)")
    reward_last: float | None = Field(description="Mean reward of the newest step")
    reward_gain: float | None = Field(
        description="Mean reward of the last ceil(n/4) steps minus that of the first ceil(n/4) (n >= 2 steps)"
    )
    training_seconds: float = Field(
        description="Sum of the steps' wait_seconds + step_seconds: the first batch request to the last step's end"
    )
    reward_per_minute: float | None = Field(description="reward_gain / (training_seconds / 60)")
    eval_before: float | None = Field(description="Held-out eval accuracy at step 0: the base model")
    eval_last: float | None = Field(description="The newest evaluation's accuracy (the final weights' when done)")
    eval_last_step: int | None
    eval_best: float | None = Field(description="The best accuracy of trained weights (evaluations at step >= 1)")
    eval_best_step: int | None
    wall_seconds: float = Field(description="From the start call to the end (to now while the run goes on)")
    tokens_trained: int = Field(description="Tokens in the trained sequences so far (metrics.jsonl `tokens`)")
    cost_usd: float | None = Field(
        description="tokens_trained x the operator's price on a paid backend; 0 on local; null without a price"
    )
    backend: str = Field(description="local or tinker, from the run's config")
    model: str = Field(description="The base model trained, from the run's config")
    budget_tokens: int = Field(description="The config's upper bound: total_steps x batch_size x max_token_length")
    budget_usd: float | None = Field(description="budget_tokens x the operator's price on a paid backend")
    reward_curve: list[tuple[int, float]] = Field(description="(step, mean reward), evenly downsampled")
    eval_curve: list[tuple[int, float]] = Field(description="(step, held-out eval accuracy)")
    teacher_kl_first: float | None = Field(
        default=None, description="A distilled run (trainer.teacher): its first step's KL to the teacher per token"
    )
    teacher_kl_last: float | None = Field(default=None, description="A distilled run: its newest step's KL")


class ConfigDifference(BaseModel):
    field: str = Field(description="Dotted name in config.yaml: env.group_size, trainer.learning_rate, ...")
    values: dict[str, Any] = Field(description="run id -> value (null where a run's config lacks the field)")


class CompareResult(BaseModel):
    runs: list[ComparedRun] = Field(description="In the order given")
    config_differences: list[ConfigDifference] = Field(
        description="Config fields whose values differ (per-run names, ports and folders left out)"
    )
    best_by_eval: str | None = Field(
        description="Highest eval_best; ties: reached at the earlier step, then fewer tokens. Null: no run has one"
    )
    best_by_reward_per_minute: str | None = Field(description="Highest reward_per_minute. Null: no run has one")
    notes: list[str] = Field(description="What could not be read (a run's config, ...)")
    next_step: str


def next_after_compare(best_by_eval: str | None, best_by_rate: str | None) -> str:
    best = best_by_eval or best_by_rate
    if best is None:
        return "No run has a reward or an evaluation yet: compare again once they have trained a few steps."
    return (
        f"rl_export_model('{best}') takes the best run's model out; rl_start_training(resume_from='{best}', "
        "fork=true) continues it with the session's current config; rl_get_results(run_id) shows one run in full."
    )


def compare_answer(comparison: Comparison) -> CompareResult:
    """The domain's comparison as the tool's answer (the same field names, its runs' alike, read by attribute)."""
    return answer_from(
        CompareResult,
        comparison,
        next_step=next_after_compare(comparison.best_by_eval, comparison.best_by_reward_per_minute),
    )
