"""The trainer's metrics sink: `<run_dir>/metrics.jsonl` always, W&B when enabled.

metrics.jsonl is the contract with rl_mcp (docs/run-files.md): one JSON object per completed
step, appended and flushed at once so a reader never sees half a step. W&B is a mirror: it runs
online when WANDB_API_KEY is set, offline (files in `<run_dir>/wandb`) otherwise, and an explicit
WANDB_MODE (online/offline/disabled) wins. A W&B failure is logged and W&B is switched off; it
never ends a training run.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tinker_atropos.run_files import JsonlWriter, RunFiles

logger = logging.getLogger(__name__)

WANDB_INIT_TIMEOUT_S = 30.0


@dataclass
class StepMetrics:
    """One metrics.jsonl line (field names and order as in docs/run-files.md).

    - `loss`: the backend's `loss:sum` divided by the completion tokens of the step; None when
      the step had nothing to train on (every group had zero advantage).
    - `logprob_drift`: mean |trainer logprob - sampler logprob| over completion tokens, i.e. how
      far the weights that produced the rollouts are from the weights being trained.
    - `token_entropy`: mean negative sampler logprob of the completion tokens of every group, an
      estimate of the policy's entropy per token (batches.BatchConversion); falls as replies collapse.
    - `grad_norm`: the gradient's global norm before clipping, as the backend's optim_step reports
      it (the local backend does; None where a backend does not, and on a step with nothing to train).
    - `learning_rate`: the rate of the step's update (its lr_schedule's value; None with nothing to train).
    - `checkpoint`: the sampler weights serving after this step (folder or tinker:// path).
    - `wait_seconds`: waiting for the batch (rollouts the environment had not finished during the
      previous step); then the step's own phases: `forward_backward_seconds`, `optim_seconds` and
      `publish_seconds` (saving the weights and loading them into the sampler). The rest of
      `step_seconds` is the batch conversion and scoring sequences that came without sampler
      logprobs (an agent environment's demonstrations).
    - `sampler_mismatch` (sampler vllm only, else left out of the line): mean |trainer logprob - vLLM's
      logprob| over the reply tokens of up to MISMATCH_DATUMS of the previous step's sequences, vLLM
      scoring them with the adapter of the very weights that step's pass used (while this step ran: the
      step never waits for it): the samplers' own disagreement (bfloat16 kernels against the trainer's),
      apart from the policy's change that `logprob_drift` has. Left out where vLLM had not answered.
    - `teacher_kl`, `teacher_logprob`, `teacher_seconds` (trainer.teacher only, else left out of the line):
      the mean over the step's reply tokens of the student's sampler logprob less the teacher's (an
      estimate of the reverse KL to the teacher on the student's own samples: it falls as the student
      learns to sample what the teacher would), the teacher's mean logprob of those tokens, and the
      seconds the teacher took to score them (distill/signal.py).
    - `agent_*`: from agentic environments' per-rollout overrides (batches.BatchConversion);
      left out of the line when no sequence reports them. W&B gets them as `agent/turns_mean`, `agent/tool_calls_mean`,
      `agent/tool_errors`.
    W&B also gets the names of Hermes' RL docs (`seed_wandb_names`): train/loss, train/learning_rate,
    reward/mean, logprobs/mean, logprobs/mean_training, logprobs/diff, advantages/mean, advantages/std.
    """

    step: int
    total_steps: int
    time: float
    loss: float | None
    reward_mean: float
    reward_std: float
    percent_correct: float | None
    advantage_mean: float
    advantage_std: float
    logprob_drift: float | None
    num_sequences: int
    num_datums: int
    tokens: int
    step_seconds: float
    checkpoint: str | None
    groups: int = 0
    no_signal_share: float | None = None
    distinct_reply_share: float | None = None
    token_entropy: float | None = None
    grad_norm: float | None = None
    learning_rate: float | None = None
    wait_seconds: float | None = None
    forward_backward_seconds: float | None = None
    optim_seconds: float | None = None
    publish_seconds: float | None = None
    reference_seconds: float | None = None  # the base model scoring the replies (kl_beta > 0)
    teacher_seconds: float | None = None  # tinker.teacher scoring the replies
    teacher_kl: float | None = None  # tinker.teacher: student - teacher logprob per reply token (reverse KL)
    teacher_logprob: float | None = None  # tinker.teacher: its mean logprob of the student's reply tokens
    sampler_mismatch: float | None = None  # sampler vllm: |trainer - vLLM logprob| on the same tokens and weights
    agent_turns_mean: float | None = None
    agent_tool_calls_mean: float | None = None
    agent_tool_errors: int | None = None
    env_metrics: dict[str, float] | None = None  # a verifiers rubric's metrics, each a mean per rollout


class PhaseClock:
    """Seconds spent in each named phase of a step: `with clock("optim"): ...`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - started, 4)


def seed_wandb_names(
    record: dict[str, Any], learning_rate: float | None, logprobs: tuple[float | None, float | None] = (None, None)
) -> dict[str, float]:
    """The W&B names Hermes' RL docs use (`train/loss`, `reward/mean`, ...), logged beside ours.

    `logprobs`: the step's mean sampler (reference) and mean trainer logprob over completion tokens."""
    lp_ref, lp_train = logprobs
    names: dict[str, Any] = {
        "train/loss": record.get("loss"),
        "train/learning_rate": learning_rate,
        "reward/mean": record.get("reward_mean"),
        "logprobs/mean": lp_ref,
        "logprobs/mean_training": lp_train,
        "logprobs/diff": lp_ref - lp_train if lp_ref is not None and lp_train is not None else None,
        "advantages/mean": record.get("advantage_mean"),
        "advantages/std": record.get("advantage_std"),
    }
    return {k: v for k, v in names.items() if isinstance(v, (int, float))}


def wandb_mode(env: dict[str, str] | None = None) -> str:
    """online | offline | disabled, from WANDB_MODE, else from whether a key is present."""
    env = os.environ if env is None else env
    explicit = env.get("WANDB_MODE", "").strip().lower()
    if explicit in ("online", "offline", "disabled"):
        return explicit
    if explicit == "dryrun":
        return "offline"
    return "online" if env.get("WANDB_API_KEY") else "offline"


class MetricsSink:
    """Appends StepMetrics to metrics.jsonl and mirrors them to W&B when enabled."""

    def __init__(
        self,
        run_dir: Path,
        *,
        use_wandb: bool = False,
        project: str = "rl-mcp",
        group: str | None = None,
        run_name: str | None = None,
        config: dict[str, Any] | None = None,
        wandb_id: str | None = None,
    ) -> None:
        self._file = JsonlWriter(RunFiles(run_dir).metrics)
        self.path = self._file.path
        self._wandb: Any = None
        self.wandb_url: str | None = None
        # Fixed before wandb.init so a resumed run can log into the same W&B run (resume="allow").
        self.wandb_run_id: str | None = (wandb_id or secrets.token_hex(4)) if use_wandb else None
        if use_wandb:
            self._start_wandb(run_dir, project, group, run_name, config or {})

    def _start_wandb(self, run_dir: Path, project: str, group: str | None, name: str | None, config: dict) -> None:
        mode = wandb_mode()
        if mode == "disabled":
            logger.info("W&B disabled by WANDB_MODE=disabled")
            return
        try:
            import wandb

            run = wandb.init(
                project=project,
                group=group,
                name=name,
                dir=str(run_dir),
                mode=mode,
                config=config,
                id=self.wandb_run_id,
                resume="allow",
                settings=wandb.Settings(init_timeout=WANDB_INIT_TIMEOUT_S, console="off"),
            )
            self._wandb = run
            self.wandb_url = run.url if mode == "online" else None
            where = self.wandb_url or str(RunFiles(run_dir).wandb_dir)
            logger.info("W&B %s: %s", mode, where)
        except Exception as exc:
            logger.warning("W&B could not start (%s); continuing without it", exc)
            self._wandb = None

    def log(self, metrics: StepMetrics, *, logprobs: tuple[float | None, float | None] = (None, None)) -> None:
        optional = ("agent_", "env_metrics", "sampler_mismatch", "teacher_")
        record = {k: v for k, v in asdict(metrics).items() if v is not None or not k.startswith(optional)}
        self._file.write(record)
        if self._wandb is not None:
            try:
                values = {k.replace("agent_", "agent/", 1): v for k, v in record.items() if isinstance(v, (int, float))}
                values.update({f"env/{k}": v for k, v in (metrics.env_metrics or {}).items()})
                values.update(seed_wandb_names(record, record.get("learning_rate"), logprobs))
                self._wandb.log(values, step=metrics.step)
            except Exception as exc:
                logger.warning("W&B log failed (%s); W&B switched off for this run", exc)
                self._wandb = None

    def close(self, exit_code: int = 0) -> None:
        self._file.close()
        if self._wandb is not None:
            try:
                self._wandb.finish(exit_code=exit_code)
            except Exception as exc:
                logger.warning("W&B finish failed: %s", exc)
            self._wandb = None
