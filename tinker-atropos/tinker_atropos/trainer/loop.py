"""The GRPO training loop: run-api batches -> Datums -> importance-sampling step -> new sampler.

Every step: take the next batch from run-api, convert it (batches.py), `forward_backward` with
`importance_sampling`, `optim_step` (Adam), save sampler weights, swap the sampler behind the
inference server so the environment's next rollouts come from the new policy, append one line to
metrics.jsonl. One run-api batch is one step, so the run ends after exactly total_steps batches.

Stopping (the `stop` event, set on SIGTERM by launch.py): a wait for a batch ends at once; a step
in progress gets STEP_GRACE_S to finish and is abandoned after that; then the final state and
sampler weights are saved (bounded by FINAL_SAVE_TIMEOUT_S) and result.json says "stopped".
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
from tinker import types

from tinker_atropos.backends.base import SamplingBackend, TrainingBackend
from tinker_atropos.backends.sampler_source import BackendSamplers, SamplerSource
from tinker_atropos.backends.tinker_compat import grad_norm_of, loss_sum_of
from tinker_atropos.best_checkpoint import BEST, Scored, best_of, weights_name, weights_path
from tinker_atropos.distill.signal import TeacherStats, with_teacher_signal
from tinker_atropos.distill.teacher import teacher_sampler
from tinker_atropos.inference_server.holder import BEST_LABEL, DONE_LABEL, FINAL_LABEL, SamplerHolder
from tinker_atropos.losses import LOSSES
from tinker_atropos.run_files import (
    JsonlReader,
    Outcome,
    RunFiles,
    RunResult,
    atomic_write_text,
    read_checkpoints,
    read_json_object,
    read_jsonl,
)
from tinker_atropos.trainer.batches import (
    BatchConversion,
    groups_to_datums,
    with_sampler_logprobs,
)
from tinker_atropos.trainer.budget import TrainingClock
from tinker_atropos.trainer.config import ConfigError, RunConfig
from tinker_atropos.trainer.lr_schedule import budget_progress, learning_rate_at
from tinker_atropos.trainer.metrics import MetricsSink, PhaseClock, StepMetrics
from tinker_atropos.trainer.objective import (
    aggregated,
    aggregation_factors,
    with_kl_penalty,
)
from tinker_atropos.trainer.run_api_client import Registration, RunApiClient
from tinker_atropos.trainer.training_state import StateKeeper

logger = logging.getLogger(__name__)

STEP_GRACE_S = 10.0
FINAL_SAVE_TIMEOUT_S = 15.0
ITEMS_POLL_S = 1.0  # how often items.json is read while waiting for a batch
ALL_RETIRED_REASON = (
    "every training item is retired as solved: each reply of its last groups solved it (items.json), so no "
    "group could teach; the final weights are the result"
)
TIME_SPENT_REASON = "its max_training_minutes are spent"
REGISTER_TIMEOUT_S = 60.0
FIRST_BATCH_GROUPS = 4  # groups of the first batch kept in first_batch.json (a few hundred KB at most)
MISMATCH_DATUMS = 4  # sequences vLLM scores again each step for sampler_mismatch (a prefill each)
LATEST_REPLIES = 3  # the best-scored replies of each step kept in latest_replies.json


def registration_for(cfg: RunConfig) -> Registration:
    """What the trainer tells run-api: sequences per step, token limit, number of steps."""
    t = cfg.trainer
    return Registration(
        wandb_group=t.wandb_group or t.run_name,
        wandb_project=t.wandb_project,
        batch_size=_env_batch_size(cfg),
        max_token_len=t.max_token_trainer_length,
        checkpoint_dir=str(RunFiles(Path(t.run_dir)).checkpoints_dir),
        save_checkpoint_interval=1,
        starting_step=t.start_step,  # a resumed run goes on from its state's step
        num_steps=t.total_steps,
    )


def _env_batch_size(cfg: RunConfig) -> int:
    value = cfg.env.batch_size
    if value is None:
        raise ConfigError(
            "env.batch_size: expected a positive integer (sequences per step), got None",
            key="env.batch_size",
            expected="integer > 0",
        )
    return value


def adam_params(cfg: RunConfig) -> types.AdamParams:
    t = cfg.trainer
    return types.AdamParams(
        learning_rate=t.learning_rate,
        beta1=t.beta1,
        beta2=t.beta2,
        eps=t.eps,
        weight_decay=t.weight_decay,
        grad_clip_norm=t.grad_clip_norm,
    )


async def reply_logprobs(sampler: SamplingBackend, datum: types.Datum, completion: np.ndarray) -> np.ndarray:
    """`sampler`'s logprob of each of the datum's reply targets (0 on its prompt targets)."""
    lps = await sampler.compute_logprobs_async(_full(datum), from_position=_first_reply(completion))
    return _on_replies(lps, completion)


async def replies_logprobs(
    sampler: SamplingBackend, datums: list[types.Datum], completions: list[np.ndarray]
) -> list[np.ndarray]:
    """reply_logprobs of every datum: at once where the sampler scores many (the local engine runs a group's
    prompt once and its replies in one pass, where a forward per reply took ~23 s a step of 256 SmolLM2
    replies), else one by one."""
    many = getattr(sampler, "compute_logprobs_many_async", None)
    if many is None:
        return list(await asyncio.gather(*(reply_logprobs(sampler, d, m) for d, m in zip(datums, completions))))
    scored = await many([_full(d) for d in datums], [_first_reply(m) for m in completions])
    return [_on_replies(lps, m) for lps, m in zip(scored, completions)]


def _first_reply(completion: np.ndarray) -> int:
    """Where the datum's reply starts in its whole sequence (its first completion target's token)."""
    return int(np.argmax(completion)) + 1 if completion.any() else len(completion)


def _full(datum: types.Datum) -> types.ModelInput:
    """The datum's whole sequence: its input and its last target."""
    targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
    return types.ModelInput.from_ints([*datum.model_input.to_ints(), int(targets[-1])])


def _on_replies(lps: list[float | None], completion: np.ndarray) -> np.ndarray:
    values = np.asarray([np.nan if v is None else v for v in lps[1:]], dtype=np.float32)
    return np.where(completion, values, 0.0).astype(np.float32)


def logprob_drift(
    output: types.ForwardBackwardOutput,
    datums: list[types.Datum],
    completion_masks: list[np.ndarray],
) -> float | None:
    """Mean |trainer logprob - sampler logprob| over completion tokens (None if not reported)."""
    total, count = 0.0, 0
    for out, datum, mask in zip(output.loss_fn_outputs, datums, completion_masks):
        if "logprobs" not in out:
            return None
        trainer_lp = out["logprobs"].to_numpy().reshape(-1)
        sampler_lp = datum.loss_fn_inputs["logprobs"].to_numpy()
        total += float(np.abs(trainer_lp - sampler_lp)[mask].sum())
        count += int(mask.sum())
    return total / count if count else None


async def sampler_mismatch(
    sampler: SamplingBackend,
    output: types.ForwardBackwardOutput,
    datums: list[types.Datum],
    completion_masks: list[np.ndarray],
) -> float | None:
    """Mean |trainer logprob - `sampler`'s logprob| over the reply tokens of the first MISMATCH_DATUMS
    datums, `sampler` serving the weights of the trainer's pass (None if the backend reports none)."""
    picked = [(o, d, m) for o, d, m in zip(output.loss_fn_outputs, datums, completion_masks) if m.any()]
    picked = picked[:MISMATCH_DATUMS]
    if not picked or any("logprobs" not in o for o, _, _ in picked):
        return None
    scored = await asyncio.gather(*(reply_logprobs(sampler, d, m) for _, d, m in picked))
    total = sum(
        float(np.abs(o["logprobs"].to_numpy().reshape(-1) - s)[m].sum()) for (o, _, m), s in zip(picked, scored)
    )
    count = sum(int(m.sum()) for _, _, m in picked)
    return round(total / count, 6)


def logprob_means(
    output: types.ForwardBackwardOutput,
    datums: list[types.Datum],
    completion_masks: list[np.ndarray],
) -> tuple[float | None, float | None]:
    """Mean sampler and mean trainer logprob over completion tokens (None, None if not reported)."""
    ref = train = 0.0
    count = 0
    for out, datum, mask in zip(output.loss_fn_outputs, datums, completion_masks):
        if "logprobs" not in out:
            return None, None
        train += float(out["logprobs"].to_numpy().reshape(-1)[mask].sum())
        ref += float(datum.loss_fn_inputs["logprobs"].to_numpy()[mask].sum())
        count += int(mask.sum())
    return (ref / count, train / count) if count else (None, None)


class Trainer:
    """One training run against one registered run-api."""

    def __init__(
        self,
        cfg: RunConfig,
        training: TrainingBackend,
        api: RunApiClient,
        holder: SamplerHolder,
        stop: asyncio.Event,
        sink: MetricsSink,
        samplers: SamplerSource,
    ) -> None:
        self.cfg = cfg
        self.training = training
        self.samplers = samplers
        self.api = api
        self.holder = holder
        self.stop = stop
        self.sink = sink
        self.steps_done = cfg.trainer.start_step  # > 0 when resumed from a saved state
        self.states = StateKeeper(cfg, training, sink.wandb_run_id)
        self.checkpoint: str | None = None
        self._sampler: SamplingBackend | None = None
        self._reference: SamplingBackend | None = None  # the base model, for kl_beta (loaded on first use)
        self._teacher: SamplingBackend | None = None  # tinker.teacher's (loaded before the first batch)
        self._adam = adam_params(cfg)
        self.clock = TrainingClock(Path(cfg.trainer.run_dir), cfg.trainer.max_training_minutes)
        self.best: Scored | None = None  # keep_best: the checkpoint the run hands out, chosen at its end
        self.best_path: str | None = None
        self._progress = 0.0  # through the run's budget (trainer/lr_schedule.py)
        # sampler vllm: vLLM scoring a step's sequences for sampler_mismatch while the next step runs
        self._mismatch: asyncio.Task[float | None] | None = None

    async def publish(self, name: str) -> str:
        """Save sampler weights as `name` and serve them from now on."""
        path = await self.training.save_weights_for_sampler_async(name)
        self._sampler = await self.samplers.for_weights(path, name)
        self.holder.swap(self._sampler, name)
        await asyncio.to_thread(_trim_heap)  # the previous sampler's model copy is free now
        self.checkpoint = path
        return path

    async def run(self) -> RunResult:
        total = self.cfg.trainer.total_steps
        waiting_over = asyncio.Event()  # a stop, or no item left to draw: no batch is coming
        watchers = [asyncio.create_task(self._watch(waiting_over))]
        try:
            self.holder.steps = self.steps_done
            await self.publish(weights_name(self.steps_done))  # the policy before any update; /health -> 200
            if self.cfg.trainer.teacher:
                tokenizer, context = self.training.get_tokenizer(), self.cfg.trainer.max_token_trainer_length
                self._teacher = await teacher_sampler(self.cfg, self.samplers, tokenizer, context)
            while self.steps_done < total and not waiting_over.is_set() and not self.clock.spent():
                waited = time.monotonic()
                groups = await self.api.next_batch(waiting_over)
                if groups is None:
                    break
                self.clock.start()
                await self._run_step(self.steps_done + 1, groups, time.monotonic() - waited)
        except Exception as exc:
            logger.exception("training failed at step %d", self.steps_done + 1)
            final_ckpt, final_state = await self._save_final(bounded=True)
            return self._result(Outcome.FAILED, final_ckpt, final_state, f"{type(exc).__name__}: {exc}")
        finally:
            for task in [*watchers, *([self._mismatch] if self._mismatch else [])]:
                task.cancel()
        timed = self.steps_done < total and self.clock.spent() and not self.stop.is_set()
        solved = self.steps_done < total and not self.stop.is_set() and not timed
        stopped = self.steps_done < total and not solved and not timed
        if stopped:
            logger.info("stop requested after %d/%d steps: saving", self.steps_done, total)
        elif solved:
            logger.info("every training item is retired as solved after %d/%d steps: ending", self.steps_done, total)
        elif timed:
            logger.info("max_training_minutes spent after %d/%d steps: ending", self.steps_done, total)
        final_ckpt, final_state = await self._save_final(bounded=stopped)
        if not stopped and not solved:
            await self._serve_final_eval()  # the environment evaluates at its last step; a solved one has none
        result = self._result(Outcome.STOPPED if stopped else Outcome.COMPLETED, final_ckpt, final_state, None)
        result.reason = ALL_RETIRED_REASON if solved else TIME_SPENT_REASON if timed else None
        return result

    async def _watch(self, waiting_over: asyncio.Event) -> None:
        """Ends the wait for a batch on a stop, or when items.json says the draw has no item left."""
        items = RunFiles(Path(self.cfg.trainer.run_dir)).items
        while not self.stop.is_set():
            if (read_json_object(items) or {}).get("all_retired"):
                break
            try:
                await asyncio.wait_for(self.stop.wait(), timeout=ITEMS_POLL_S)
            except TimeoutError:
                pass
        waiting_over.set()

    async def _serve_final_eval(self) -> None:
        """Keep serving the final weights until the environment has evaluated them (it asks for
        that with `eval_at_end` in its config), then, with keep_best, the best checkpoint by validation
        until the held-out set has scored it too; bounded in time and by a stop request."""
        if not self.cfg.env.eval_at_end or self.cfg.env.eval_size == 0:
            return
        self.holder.relabel(FINAL_LABEL)
        files = RunFiles(Path(self.cfg.trainer.run_dir))
        timeout_s = self.cfg.trainer.final_eval_timeout_s
        logger.info("serving the final weights for the environment's final evaluation (up to %.0f s)", timeout_s)
        deadline = time.monotonic() + timeout_s
        last = self.steps_done
        if not await self._held_out_line(
            files, deadline, lambda row: row.get("step") == last and not row.get("checkpoint")
        ):
            logger.warning("no final evaluation within %.0f s; ending without it", timeout_s)
            return
        logger.info("final evaluation written")
        best = best_of(read_jsonl(files.validation)) if self.cfg.trainer.keep_best else None
        path = self._sampler_weights(best.weights) if best else None
        if best is not None and path is None:
            logger.warning("the best checkpoint %s is not on record: the last one is the result", best.weights)
        elif best is not None:
            self.best, self.best_path = best, path
            logger.info("best checkpoint: %s (validation %.3f)", best.weights, best.accuracy)
            if best.weights != weights_name(last):  # the held-out set scores it as well
                self.holder.swap(await self.samplers.for_weights(path, BEST_LABEL), BEST_LABEL)
                await self._held_out_line(files, deadline, lambda row: row.get("checkpoint") == BEST)
        self.holder.relabel(DONE_LABEL)

    async def _held_out_line(self, files: RunFiles, deadline: float, wanted: Any) -> bool:
        """Wait until eval.jsonl has a final line `wanted` accepts (False at the deadline or a stop)."""
        evals = JsonlReader(files.evals)
        while time.monotonic() < deadline and not self.stop.is_set():
            if any(row.get("final") and wanted(row) for row in evals.refresh()):
                return True
            await asyncio.sleep(0.1)
        return False

    def _sampler_weights(self, name: str) -> str | None:
        """The path of the sampler weights `name` (this run's, or by path its parent's)."""
        return weights_path(name, read_checkpoints(Path(self.cfg.trainer.run_dir), self.cfg.trainer.run_name))

    async def _run_step(self, step: int, groups: list[dict[str, Any]], wait_seconds: float) -> None:
        """Run one step; when stop is set meanwhile, grant it STEP_GRACE_S, then abandon it."""
        task = asyncio.create_task(self._step(step, groups, wait_seconds))
        stop_wait = asyncio.create_task(self.stop.wait())
        try:
            await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
            if not task.done():
                done, _ = await asyncio.wait({task}, timeout=STEP_GRACE_S)
                if not done:
                    logger.warning("abandoning step %d after a %.0fs grace", step, STEP_GRACE_S)
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
                    return
            task.result()
        finally:
            stop_wait.cancel()

    async def _step(self, step: int, groups: list[dict[str, Any]], wait_seconds: float) -> None:
        started = time.monotonic()
        if step == self.cfg.trainer.start_step + 1:
            write_first_batch(Path(self.cfg.trainer.run_dir), step, groups)
        write_latest_replies(Path(self.cfg.trainer.run_dir), step, groups, self.training.get_tokenizer())
        t = self.cfg.trainer
        conv = groups_to_datums(groups, t.advantage_scale, keep_tied=self._teacher is not None and t.distill_coef > 0)
        datums = await self._fill_missing_logprobs(conv)
        loss = drift = lp_ref = lp_train = grad_norm = mismatch = None
        taught = TeacherStats(None, None)
        # never back: an evaluation's seconds leave the clock only once its line is written
        self._progress = max(self._progress, budget_progress(t, step, self.clock.seconds()))
        learning_rate = learning_rate_at(t, step, self._progress)
        phases = PhaseClock()
        if datums:
            if self._teacher is not None:
                with phases("teacher"):
                    datums, taught = await self._with_teacher(datums, conv.completion_masks)
            if t.kl_beta > 0:
                with phases("reference"):
                    datums = await self._with_kl_penalty(datums, conv.completion_masks)
            budget = self.cfg.env.reply_budget() or t.max_reply_tokens  # constant's tokens per reply
            factors = aggregation_factors(conv.completion_masks, t.loss_aggregation, budget)
            loss_fn = LOSSES[t.loss_fn]
            trained = loss_fn.datums(aggregated(datums, factors))
            with phases("forward_backward"):
                output = await self.training.forward_backward_async(trained, t.loss_fn, loss_fn.settings(t, factors[0]))
            with phases("optim"):
                optim = await self.training.optim_step_async(
                    self._adam.model_copy(update={"learning_rate": learning_rate})
                )
            grad_norm = grad_norm_of(optim.metrics)
            if t.sampler == "vllm" and self._sampler is not None:  # still the weights of the pass above
                mismatch = self._previous_mismatch()
                scored = sampler_mismatch(self._sampler, output, datums, conv.completion_masks)
                self._mismatch = asyncio.create_task(scored)
            with phases("publish"):
                await self.publish(weights_name(step))
            if (loss_sum := loss_sum_of(output, datums)) is not None:  # per token, or the aggregated objective
                loss = loss_sum / max(conv.completion_tokens, 1) if t.loss_aggregation == "sum" else loss_sum
            drift = logprob_drift(output, datums, conv.completion_masks)
            lp_ref, lp_train = logprob_means(output, datums, conv.completion_masks)
        self.steps_done = step
        self.holder.steps = step
        metrics = StepMetrics(
            step=step,
            total_steps=self.cfg.trainer.total_steps,
            time=time.time(),
            loss=loss,
            reward_mean=conv.reward_mean,
            reward_std=conv.reward_std,
            percent_correct=conv.percent_correct,
            advantage_mean=conv.advantage_mean,
            advantage_std=conv.advantage_std,
            logprob_drift=drift,
            num_sequences=conv.num_sequences,
            num_datums=len(datums),
            tokens=conv.tokens,
            step_seconds=round(time.monotonic() - started, 4),
            checkpoint=self.checkpoint,
            groups=conv.groups,
            no_signal_share=round(conv.skipped_groups / conv.groups, 4) if conv.groups else None,
            distinct_reply_share=None if conv.distinct_reply_share is None else round(conv.distinct_reply_share, 4),
            token_entropy=None if conv.token_entropy is None else round(conv.token_entropy, 4),
            grad_norm=grad_norm,
            learning_rate=learning_rate if datums else None,
            wait_seconds=round(wait_seconds, 4),
            forward_backward_seconds=phases.seconds.get("forward_backward"),
            optim_seconds=phases.seconds.get("optim"),
            publish_seconds=phases.seconds.get("publish"),
            reference_seconds=phases.seconds.get("reference"),
            teacher_seconds=phases.seconds.get("teacher"),
            teacher_kl=taught.kl,
            teacher_logprob=taught.teacher_logprob,
            sampler_mismatch=mismatch,
            agent_turns_mean=conv.agent_turns_mean,
            agent_tool_calls_mean=conv.agent_tool_calls_mean,
            agent_tool_errors=conv.agent_tool_errors,
            env_metrics=conv.env_metrics,
        )
        self.sink.log(metrics, logprobs=(lp_ref, lp_train))
        if self.states.due(step):
            await self.states.save(step)
        logger.info(
            "step %d/%d loss=%s reward=%.4f±%.4f correct=%s drift=%s seqs=%d datums=%d "
            "skipped_groups=%d tokens=%d %.2fs",
            step,
            metrics.total_steps,
            _fmt(loss),
            conv.reward_mean,
            conv.reward_std,
            _fmt(conv.percent_correct),
            _fmt(drift),
            conv.num_sequences,
            len(datums),
            conv.skipped_groups,
            conv.tokens,
            metrics.step_seconds,
        )

    async def _fill_missing_logprobs(self, conv: BatchConversion) -> list[types.Datum]:
        """Score sequences that came without inference_logprobs with the serving sampler."""
        datums = list(conv.datums)
        if not conv.missing_logprobs or self._sampler is None:
            return datums
        sampler = self._sampler

        async def score(k: int) -> None:
            datums[k] = with_sampler_logprobs(
                datums[k], await reply_logprobs(sampler, datums[k], conv.completion_masks[k])
            )

        await asyncio.gather(*(score(k) for k in conv.missing_logprobs))
        return datums

    def _previous_mismatch(self) -> float | None:
        """The previous step's sampler_mismatch where vLLM has scored it by now (it queues behind the
        rollouts vLLM is generating: waiting for it cost ~10 s a step on a 2-core CPU)."""
        task, self._mismatch = self._mismatch, None
        if task is None or not task.done():
            if task is not None:
                task.cancel()
            return None
        if task.cancelled() or task.exception() is not None:
            logger.warning("vLLM could not score the step's sequences for sampler_mismatch: %r", task.exception())
            return None
        return task.result()

    async def _with_kl_penalty(self, datums: list[types.Datum], masks: list[np.ndarray]) -> list[types.Datum]:
        """The datums with the KL to the base model in their advantages (the base model loaded once)."""
        if self._reference is None:
            self._reference = await self.samplers.for_base()
        reference = self._reference
        refs = await replies_logprobs(reference, datums, masks)
        return with_kl_penalty(datums, masks, refs, self.cfg.trainer.kl_beta)

    async def _with_teacher(
        self, datums: list[types.Datum], masks: list[np.ndarray]
    ) -> tuple[list[types.Datum], TeacherStats]:
        """The datums with the teacher's signal in their advantages (the teacher scoring every reply)."""
        teacher, t = self._teacher, self.cfg.trainer
        assert teacher is not None
        scored = await replies_logprobs(teacher, datums, masks)
        return with_teacher_signal(datums, masks, scored, t.distill_coef, t.reward_coef)

    async def _save_final(self, *, bounded: bool) -> tuple[str | None, str | None]:
        """Save adapter + optimizer state and the final sampler weights."""

        async def save() -> tuple[str, str]:
            state = await self.states.save(self.steps_done, final=True)
            weights = await self.training.save_weights_for_sampler_async("final")
            return weights, state

        url = self.cfg.trainer.tinker_base_url if self.cfg.trainer.backend == "tinker" else None
        if bounded and url and await asyncio.to_thread(_refuses_connections, url):
            logger.error("final save skipped: %s refuses connections; last sampler weights: %s", url, self.checkpoint)
            return self.checkpoint, None  # its engine is gone (killed, out of memory): no save can land
        try:
            if bounded:
                return await asyncio.wait_for(save(), timeout=FINAL_SAVE_TIMEOUT_S)
            return await save()
        except Exception as exc:
            why = f"not done within {FINAL_SAVE_TIMEOUT_S:.0f} s" if isinstance(exc, TimeoutError) else repr(exc)
            logger.error("final save failed (%s); last sampler weights: %s", why, self.checkpoint)
            return self.checkpoint, None

    def _result(self, status: str, final_ckpt: str | None, final_state: str | None, error: str | None) -> RunResult:
        return RunResult(
            status=status,
            steps=self.steps_done,
            final_checkpoint=final_ckpt,
            final_state=final_state,
            backend=self.cfg.trainer.backend,
            wandb_url=self.sink.wandb_url,
            error=error,
            best_checkpoint=self.best_path if self.best else None,
            best_step=self.best.step if self.best else None,
        )


async def train(
    cfg: RunConfig,
    *,
    training: TrainingBackend | None = None,
    api: RunApiClient | None = None,
    holder: SamplerHolder | None = None,
    stop: asyncio.Event | None = None,
    samplers: SamplerSource | None = None,
) -> RunResult:
    """Train for cfg.trainer.total_steps; writes metrics.jsonl and result.json in run_dir.

    launch.py passes the backend, a registered run-api client, the holder its inference server reads
    and where samplers come from (vLLM's server or the backend); called with the config alone, this
    builds the backend and registers itself.
    """
    run_dir = Path(cfg.trainer.run_dir)
    if training is None:
        from tinker_atropos.backends.factory import create_training_backend

        training = await asyncio.to_thread(create_training_backend, cfg)
    own_api = api is None
    if api is None:
        api = RunApiClient(cfg.trainer.api_url)
        await api.register(registration_for(cfg), timeout_s=REGISTER_TIMEOUT_S)
    sink = MetricsSink(
        run_dir,
        use_wandb=cfg.trainer.use_wandb,
        project=cfg.trainer.wandb_project,
        group=cfg.trainer.wandb_group or cfg.trainer.run_name,  # the group the env logs to
        run_name=cfg.trainer.run_name,
        config=_public_config(cfg),
        wandb_id=cfg.trainer.wandb_run_id,  # set when resumed: the parent's W&B run goes on
    )
    source = samplers or BackendSamplers(cfg, training)
    trainer = Trainer(cfg, training, api, holder or SamplerHolder(), stop or asyncio.Event(), sink, source)
    try:
        result = await trainer.run()
    finally:
        if own_api:
            await api.aclose()
    sink.close(exit_code=0 if result.status != Outcome.FAILED else 1)
    result.write(run_dir)
    return result


def write_first_batch(run_dir: Path, step: int, groups: list[dict[str, Any]]) -> None:
    """Keep the run's first batch as the environment sent it (its first FIRST_BATCH_GROUPS groups), so
    a user can decode what the trainer trains on: the tokens, and which of them are trained (masks)."""
    keys = ("tokens", "masks", "scores", "messages")
    kept = [{k: group.get(k) for k in keys} for group in groups[:FIRST_BATCH_GROUPS]]
    atomic_write_text(RunFiles(run_dir).first_batch, json.dumps({"step": step, "groups": kept}))


def write_latest_replies(run_dir: Path, step: int, groups: list[dict[str, Any]], tokenizer: Any) -> None:
    """Replace latest_replies.json with the step's LATEST_REPLIES best-scored replies (their trained
    tokens decoded), so that a reward the replies game shows in what it pays for."""
    scored = [
        (float(score), tokens, masks)
        for group in groups
        for score, tokens, masks in zip(group.get("scores") or [], group.get("tokens") or [], group.get("masks") or [])
    ]
    best = sorted(scored, key=lambda item: -item[0])[:LATEST_REPLIES]
    replies = [
        {"score": score, "reply": tokenizer.decode([t for t, m in zip(tokens, masks) if m != -100])}
        for score, tokens, masks in best
    ]
    atomic_write_text(RunFiles(run_dir).latest_replies, json.dumps({"step": step, "replies": replies}))


def _public_config(cfg: RunConfig) -> dict[str, Any]:
    """The run's hyperparameters for W&B (the config file never holds secrets)."""
    return {"trainer": cfg.trainer.model_dump(mode="json"), "env": cfg.env.as_written()}


def _refuses_connections(url: str) -> bool:
    """True when nothing listens at `url`'s host and port (refused at once, where the SDK would retry a
    save until the bound)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=2.0):
            return False
    except ConnectionRefusedError:
        return True
    except OSError:
        return False  # slow or unreachable: the bounded save says so


def _trim_heap() -> None:
    """Hand freed memory back to the OS. Each step frees a whole model copy (the old sampler); on
    glibc it stays in the process's heap otherwise: a SmolLM2-135M trainer grew from 2 GB to 14 GB
    in 9 agent-environment steps; with the trim it stays at its first step's size."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"
