"""Two to eight runs side by side (rl_compare_runs, `mcp-server-rl compare`): the config fields that
differ, each run's figures from its files (so far, for a run still going), and the best run.

The figures, precisely (the tool's description says the same):
- `training_seconds`: the sum of `wait_seconds + step_seconds` over the steps in metrics.jsonl:
  from the trainer's first request for a batch to the end of its last step (the waits for
  rollouts and evaluations included; the start-up and the evaluation after the last step not).
- `reward_gain`: the mean `reward_mean` of the last ceil(n/4) steps minus that of the first
  ceil(n/4), over the n steps with a reward (n >= 2; else None). Step 1's rollouts come from the
  untrained model, so the gain is what training added; a quarter of the steps damps the noise.
- `reward_per_minute`: `reward_gain / (training_seconds / 60)`.
- best by held-out eval: the highest `eval_accuracy` of an evaluation of trained weights (step
  >= 1; step 0 is the untouched base model, the same in every run); a tie goes to the run that
  reached it at the earlier step, then to the one that trained fewer tokens, then to the first given.
- best by reward per minute: the highest; a tie goes to the shorter training, then the first given.
"""

from __future__ import annotations

import fnmatch
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rl_mcp.errors import UserError
from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from rl_mcp.runs.cost import recorded_estimate, usd_for
from rl_mcp.runs.metrics import MetricsCache, Points, downsample, eval_summary, series
from rl_mcp.runs.store import RunRecord

MIN_RUNS, MAX_RUNS = 2, 8
MAX_CURVE_POINTS = 200
# Config fields set for each run by the server (names, ports, folders, W&B ids): they always
# differ and say nothing about how a run was trained.
PER_RUN_FIELDS = (
    "env.wandb_name",
    "env.rollout_server_url",
    "env.data_dir_to_save_evals",
    "openai.*.base_url",
    "trainer.api_url",
    "trainer.inference_port",
    "trainer.run_dir",
    "trainer.run_name",
    "trainer.wandb_run_id",
)


class CompareError(UserError):
    """The runs asked for cannot be compared as given."""


@dataclass(frozen=True)
class RunFigures:
    run_id: str
    environment: str
    status: str
    steps_completed: int
    total_steps: int
    reward_first: float | None
    reward_last: float | None
    reward_gain: float | None
    training_seconds: float
    reward_per_minute: float | None
    eval_before: float | None  # step 0: the base model
    eval_last: float | None
    eval_last_step: int | None
    eval_best: float | None  # trained weights only (step >= 1)
    eval_best_step: int | None
    wall_seconds: float  # created -> ended (or now, for a run still going)
    tokens_trained: int
    cost_usd: float | None  # tokens_trained at the price; 0 on the local backend
    backend: str
    model: str
    budget_tokens: int  # the config's upper bound (total_steps x batch_size x max_token_length)
    budget_usd: float | None
    reward_curve: Points
    eval_curve: Points
    teacher_kl_first: float | None = None  # a distilled run (trainer.teacher): its first step's KL to the teacher
    teacher_kl_last: float | None = None  # ... and its newest


@dataclass(frozen=True)
class ConfigDifference:
    field: str  # dotted: env.group_size, tinker.learning_rate, openai.0.model_name
    values: dict[str, Any]  # run id -> value (None where a run's config lacks it)


@dataclass(frozen=True)
class Comparison:
    runs: list[RunFigures]
    config_differences: list[ConfigDifference]
    best_by_eval: str | None
    best_by_reward_per_minute: str | None
    notes: list[str]  # what could not be read, per run

    def chart_png(self) -> bytes:
        """Every run's reward (solid) and eval (dashed) curve on one chart."""
        from rl_mcp.plots import compare_png  # matplotlib: imported on first use

        curves = [(r.run_id, r.reward_curve, r.eval_curve) for r in self.runs]
        return compare_png(curves, title="mean reward and held-out eval accuracy")


def check_run_ids(run_ids: Sequence[str]) -> None:
    if not MIN_RUNS <= len(run_ids) <= MAX_RUNS:
        raise CompareError(f"give {MIN_RUNS} to {MAX_RUNS} run ids, not {len(run_ids)} (rl_list_runs lists them)")
    seen: set[str] = set()
    for run_id in run_ids:
        if run_id in seen:
            raise CompareError(f"run id {run_id!r} is given twice: name each run once")
        seen.add(run_id)


def compare_runs(
    records: Sequence[RunRecord], cache: MetricsCache, *, usd_per_million_tokens: float | None, now: float | None = None
) -> Comparison:
    """The runs' figures, their config differences and the best of them (see the module's definitions)."""
    check_run_ids([r.run_id for r in records])
    now = time.time() if now is None else now
    notes: list[str] = []
    configs = {rec.run_id: _config(rec, notes) for rec in records}
    runs = [_figures(rec, cache, configs[rec.run_id], usd_per_million_tokens, rec.ended_at or now) for rec in records]
    return Comparison(
        runs=runs,
        config_differences=config_differences(configs),
        best_by_eval=_best(runs, lambda r: r.eval_best, lambda r: (r.eval_best_step or 0, r.tokens_trained)),
        best_by_reward_per_minute=_best(runs, lambda r: r.reward_per_minute, lambda r: (r.training_seconds, 0)),
        notes=notes,
    )


def config_differences(configs: Mapping[str, Mapping[str, Any]]) -> list[ConfigDifference]:
    """The dotted fields whose values are not the same in every config (per-run wiring left out)."""
    flat = {run_id: _flatten(config) for run_id, config in configs.items()}
    names = sorted({name for fields in flat.values() for name in fields})
    out = []
    for name in names:
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in PER_RUN_FIELDS):
            continue
        values = {run_id: fields.get(name) for run_id, fields in flat.items()}
        if len({repr(v) for v in values.values()}) > 1:
            out.append(ConfigDifference(name, values))
    return out


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, inner in items:
        out.update(_flatten(inner, f"{prefix}.{key}" if prefix else key))
    return out


def _config(rec: RunRecord, notes: list[str]) -> dict[str, Any]:
    try:
        return read_run_config(rec.config_path)
    except RUN_CONFIG_ERRORS as exc:
        notes.append(f"run {rec.run_id}: its config {rec.config_path} could not be read ({exc.__class__.__name__})")
        return {}


def _figures(
    rec: RunRecord, cache: MetricsCache, config: Mapping[str, Any], price: float | None, end: float
) -> RunFigures:
    metrics, evals = cache.metrics(rec), cache.evals(rec)
    rewards = series(metrics, "reward_mean")
    seconds = round(sum(v for key in ("wait_seconds", "step_seconds") for _, v in series(metrics, key)), 1)
    tokens = int(sum(v for _, v in series(metrics, "tokens")))
    gain = _reward_gain([r for _, r in rewards])
    every = eval_summary(evals)
    # trained weights' held-out scores, the best checkpoint's (chosen on validation) among them
    trained = max(((a, -s) for s, a in series(evals, "eval_accuracy") if s >= 1), default=None)
    budget = recorded_estimate(config, price)
    kl = series(metrics, "teacher_kl")
    return RunFigures(
        teacher_kl_first=kl[0][1] if kl else None,
        teacher_kl_last=kl[-1][1] if kl else None,
        run_id=rec.run_id,
        environment=rec.environment,
        status=str(rec.status),
        steps_completed=int(metrics[-1].get("step", len(metrics))) if metrics else 0,
        total_steps=rec.total_steps,
        reward_first=rewards[0][1] if rewards else None,
        reward_last=rewards[-1][1] if rewards else None,
        reward_gain=gain,
        training_seconds=seconds,
        reward_per_minute=round(gain / (seconds / 60), 4) if gain is not None and seconds > 0 else None,
        eval_before=every.before if every and every.before_step == 0 else None,
        eval_last=every.after if every else None,
        eval_last_step=every.after_step if every else None,
        eval_best=trained[0] if trained else None,
        eval_best_step=-trained[1] if trained else None,
        wall_seconds=round(max(end - rec.created_at, 0.0), 1),
        tokens_trained=tokens,
        cost_usd=0.0 if budget.backend == "local" else usd_for(tokens, budget.usd_per_million_tokens),
        backend=budget.backend,
        model=budget.model,
        budget_tokens=budget.max_tokens,
        budget_usd=budget.estimated_usd,
        reward_curve=downsample(rewards, MAX_CURVE_POINTS),
        eval_curve=downsample(series(evals, "eval_accuracy"), MAX_CURVE_POINTS),
    )


def _reward_gain(rewards: list[float]) -> float | None:
    if len(rewards) < 2:
        return None
    k = math.ceil(len(rewards) / 4)
    return round(sum(rewards[-k:]) / k - sum(rewards[:k]) / k, 4)


def _best(
    runs: list[RunFigures],
    score: Callable[[RunFigures], float | None],
    tie: Callable[[RunFigures], tuple[float, float]],
) -> str | None:
    """The run with the highest `score` (None: not ranked); ties by the smaller `tie`, then order."""
    ranked = [(-s, *tie(r), i, r.run_id) for i, r in enumerate(runs) if (s := score(r)) is not None]
    return min(ranked)[-1] if ranked else None
