"""`python -m tinker_atropos.sft.stage --config run.yaml --env-file F`: a run's supervised stage, in one
process that holds the environment (its tools, its evaluation) and the run's training backend.

Top to bottom: build the supervised set (a teacher served or asked first; `--preview`: write what
the agent is shown of it, with one step timed, and stop) -> load the model (and start vLLM's server
under `trainer.sampler: vllm`), serve it on the run's inference port -> evaluate the held-out items
(before) -> cross_entropy steps, evaluating every `eval_every` and stopping early at
`stop_at_tool_call_share` -> evaluate (after) -> save the training state the RL stage starts from
(indexed at step 0), and `sft/result.json`.

A stage stopped before its end saves its state as `ended: stopped`; the resumed run's stage goes
on from there with the same examples and order of batches.

Every evaluation line carries `stage: "sft"` and `sft_step`, so the curves tell them from RL's. The
environment's model requests are recorded and their timeouts fitted as in RL's environment process
(`env_process/health.py`, env_health.json): the server times a decode step before the first
evaluation, so no request is held to the environment's own fixed timeout and asked again.
Exit codes are the trainer's (`run_files.ExitCode`); SIGTERM ends the current step (an evaluation at
once, its requests cancelled), then saves.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import runpy
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker import types

from tinker_atropos.agent.base_env import HermesAgentBaseEnv
from tinker_atropos.backends.base import SamplingBackend, TrainingBackend
from tinker_atropos.backends.local.decode_clock import ROWS_MIN_STEPS
from tinker_atropos.backends.sampler_source import SamplerSource, backend_and_samplers
from tinker_atropos.env_process import health
from tinker_atropos.env_process.logs import FORMAT, quiet_http_lines
from tinker_atropos.inference_server.serve import PortBindError
from tinker_atropos.owner import end_with_owner
from tinker_atropos.request_timeouts import Policy, workload
from tinker_atropos.run_files import (
    ExitCode,
    RunFiles,
    append_jsonl,
    atomic_write_text,
    read_jsonl,
    read_training_states,
    stopped_sft,
    write_training_states,
)
from tinker_atropos.sft.examples import Example
from tinker_atropos.sft.settings import SftSettings
from tinker_atropos.sft.steps import SftStep, batches, example_datum, sft_step
from tinker_atropos.sft.supervised_set import NoExamples, build_set, read_examples, write_set
from tinker_atropos.sft.teacher import TeacherUnavailable, teacher_server
from tinker_atropos.trainer.config import ConfigError, RunConfig, load_run_config
from tinker_atropos.trainer.loop import adam_params
from tinker_atropos.trainer.training_state import SFT_STATE_NAME, state_entry

logger = logging.getLogger("tinker_atropos.sft")
TIMED_TOKENS = 2 * ROWS_MIN_STEPS  # decode steps timed before the first evaluation: the clock reports their rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tinker_atropos.sft.stage", description=__doc__)
    parser.add_argument("--config", required=True, help="the run YAML (its env section has `sft`)")
    parser.add_argument("--env-file", required=True, help="the environment's file")
    parser.add_argument("--env-class", default=None, help="the environment class, where the file has several")
    parser.add_argument("--preview", action="store_true", help="build the supervised set and stop")
    args = parser.parse_args(argv)
    end_with_owner()  # the server that started it: as `setpriv --pdeathsig TERM` would
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=FORMAT)
    quiet_http_lines()
    try:
        cfg = load_run_config(args.config)
        settings = sft_settings(cfg)
        # every environment built from here on (the teacher's too): its requests recorded and fitted as RL's
        health.install(RunFiles(Path(cfg.trainer.run_dir)).env_health, Policy.from_section(cfg.request_timeouts))
        cls = environment_class(Path(args.env_file), args.env_class)
        env = build_env(cls, cfg)
    except (ConfigError, ValueError) as exc:
        logger.error("invalid config: %s", exc)
        return ExitCode.CONFIG
    try:
        return asyncio.run(_stage(cfg, settings, cls, env, preview=args.preview))
    except (NoExamples, TeacherUnavailable) as exc:
        logger.error("%s", exc)
        return ExitCode.CONFIG
    except PortBindError as exc:
        logger.error("%s", exc)
        return ExitCode.PORT
    except Exception:
        logger.exception("the supervised stage failed")
        return ExitCode.ERROR


def sft_settings(cfg: RunConfig) -> SftSettings:
    raw = cfg.env.sft
    if not raw:
        raise ConfigError("the run's environment has no `sft` section", key="env.sft")
    return SftSettings.model_validate(raw)


def environment_class(env_file: Path, name: str | None) -> type[HermesAgentBaseEnv]:
    """The agent environment the file defines (not one it imports)."""
    sys.path.insert(0, str(env_file.parent))  # what `python <file>` does: sibling imports work
    namespace = runpy.run_path(str(env_file), run_name="rl_mcp_sft_env")
    found = [
        v
        for v in namespace.values()
        if isinstance(v, type) and issubclass(v, HermesAgentBaseEnv) and v.__module__ == "rl_mcp_sft_env"
    ]
    if name is not None:
        found = [c for c in found if c.__name__ == name]
    if len(found) != 1:
        names = ", ".join(c.__name__ for c in found) or "none"
        raise ValueError(f"{env_file}: expected one agent environment (HermesAgentBaseEnv) for SFT, found {names}")
    return found[0]


def build_env(cls: type[HermesAgentBaseEnv], cfg: RunConfig) -> HermesAgentBaseEnv:
    """The environment as its run's `serve` builds it: config_init() under the run's sections."""
    config, servers = cls.config_init()
    env_config = type(config).model_validate({**config.model_dump(), **cfg.env.as_written()})
    server = servers[0] if isinstance(servers, list) else servers
    merged = type(server).model_validate({**server.model_dump(), **(cfg.openai[0] if cfg.openai else {})})
    return cls(env_config, [merged])


async def _stage(
    cfg: RunConfig, settings: SftSettings, cls: type[HermesAgentBaseEnv], env: HermesAgentBaseEnv, *, preview: bool
) -> int:
    files = RunFiles(Path(cfg.trainer.run_dir))
    files.sft_dir.mkdir(parents=True, exist_ok=True)
    await env.setup()
    if not preview and (stopped := stopped_stage(files)) is not None:  # a resumed run: its set is built
        logger.info("going on with the stopped stage after step %d, from %s", stopped.steps, stopped.state)
        return await _train(cfg, settings, env, read_examples(files.sft_examples), files, _stop_on_signal(), stopped)
    started = time.monotonic()
    if "teacher" in settings.sources and settings.teacher is not None:
        async with teacher_server(cfg, settings.teacher) as server:
            taught = cfg.model_copy(update={"openai": [{**(cfg.openai[0] if cfg.openai else {}), **server}]})
            teacher_env = build_env(cls, taught)
            try:
                await teacher_env.setup()
                supervised = await build_set(env, settings, teacher_env)
            finally:
                await close_servers(teacher_env)
    else:
        supervised = await build_set(env, settings)
    write_set(supervised, files.sft_examples, files.sft_summary, env.tokenizer)
    logger.info("supervised set: %s in %.1f s", json.dumps(supervised.counts()), time.monotonic() - started)
    examples = supervised.require_examples()
    if preview:
        plan = await _plan(cfg, settings, examples)
        write_set(supervised, files.sft_examples, files.sft_summary, env.tokenizer, plan)
        return ExitCode.OK
    return await _train(cfg, settings, env, examples, files, _stop_on_signal(), None)


async def close_servers(env: HermesAgentBaseEnv) -> None:
    """Stop an environment's server health checks and close its clients (the teacher's endpoint is
    gone once the set is built, and its checks would retry it for the rest of the stage), and what
    its setup() started (an OpenEnv server, MCP sessions)."""
    await env.close()
    stop_server_checks(env)
    for server in env.server.servers:
        await server.openai.close()


def stop_server_checks(env: HermesAgentBaseEnv) -> None:
    """atroposlib's check of each server, a request a second: once its server is gone, each would be
    refused and retried until the process ends."""
    for server in env.server.servers:
        if server.check_task is not None:
            server.check_task.cancel()


def _stop_on_signal() -> asyncio.Event:
    """Set on SIGTERM or SIGINT: the step in progress ends (an evaluation is cancelled at once: it may
    take far longer than the server's grace before SIGKILL), then the stage saves what it trained."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _plan(cfg: RunConfig, settings: SftSettings, examples: list[Example]) -> dict[str, Any]:
    """The stage's length, and its time from one step timed here (local backend: the model loaded,
    one forward_backward of a batch, nothing applied); a Tinker service's step is not timed."""
    total = settings.steps_for(len(examples))
    plan: dict[str, Any] = {"steps": total, "batch_size": settings.batch_size, "seconds_per_step": None}
    if cfg.trainer.backend != "local":
        return {**plan, "estimate": "not timed: a Tinker service's step time is its own"}
    from tinker_atropos.backends.factory import close_backend, create_training_backend

    training = await asyncio.to_thread(create_training_backend, cfg)
    batch = next(batches(examples, settings.batch_size, 1, cfg.trainer.seed))
    try:
        clock = time.monotonic()
        await training.forward_backward_async([example_datum(e) for e in batch], "cross_entropy")
        per_step = round(time.monotonic() - clock, 3)
    finally:
        await asyncio.to_thread(close_backend, training)
    return {**plan, "seconds_per_step": per_step, "estimate": "one step timed on this machine"}


@dataclass(frozen=True)
class Stopped:
    """Where a stopped stage left off (sft/result.json `ended: stopped`): a resumed run goes on from there."""

    steps: int
    state: str


def stopped_stage(files: RunFiles) -> Stopped | None:
    found = stopped_sft(files.run_dir)
    return Stopped(*found) if found is not None and files.sft_examples.is_file() else None


async def _train(
    cfg: RunConfig,
    settings: SftSettings,
    env: HermesAgentBaseEnv,
    examples: list[Example],
    files: RunFiles,
    stop: asyncio.Event,
    stopped: Stopped | None,
) -> int:
    from tinker_atropos.backends.factory import BackendUnavailable

    # a self-hosted engine's adapter slot is given back, and a vLLM server stopped, however the stage ends
    async with AsyncExitStack() as stack:
        try:
            training, samplers = await stack.enter_async_context(backend_and_samplers(cfg))
        except BackendUnavailable as exc:
            logger.error("backend unavailable: %s", exc)
            return ExitCode.BACKEND
        return await _steps(cfg, settings, env, examples, files, stop, stopped, training, samplers)


async def _steps(
    cfg: RunConfig,
    settings: SftSettings,
    env: HermesAgentBaseEnv,
    examples: list[Example],
    files: RunFiles,
    stop: asyncio.Event,
    stopped: Stopped | None,
    training: TrainingBackend,
    samplers: SamplerSource,
) -> int:
    """The stage's steps between its evaluations, its state saved and indexed, sft/result.json."""
    if stopped is not None:  # adapter and optimizer as the stopped stage left them
        await training.load_state_async(stopped.state)
    async with served(cfg, training, samplers, env, files, stop, examples[0].prompt) as (publish, evaluate):
        total = settings.steps_for(len(examples))
        # the run's Adam (betas, eps, weight decay, gradient clipping) at the stage's learning rate
        adam = adam_params(cfg).model_copy(update={"learning_rate": settings.learning_rate})
        reason, done = "budget", stopped.steps if stopped else 0
        if stopped is None:
            await publish("sft-000000")
            await evaluate(0)
        for step, batch in enumerate(batches(examples, settings.batch_size, total, cfg.trainer.seed), start=1):
            if step <= done:
                continue  # trained before the stop: the same order of batches goes on
            if stop.is_set():
                reason = "stopped"
                break
            clock = time.monotonic()
            made = await sft_step(training, batch, adam)
            done = step
            _log_step(files, step, total, made, time.monotonic() - clock)
            if settings.eval_every and step % settings.eval_every == 0 and step < total:
                await publish(f"sft-{step:06d}")
                record = await evaluate(step)
                target = settings.stop_at_tool_call_share
                if target is not None and record and record.get("eval_tool_call_share", 0.0) >= target:
                    reason = "tool_call_share"
                    break
        sampler_path = await publish(f"sft-{done:06d}-final")
        if reason != "stopped":
            await evaluate(done)
    state = await training.save_state_async(SFT_STATE_NAME if reason != "stopped" else "sft-stopped")
    if reason != "stopped":  # RL, a resume or a fork can start from it (training_states.jsonl, step 0)
        index = [s for s in read_training_states(files.run_dir) if s.name != SFT_STATE_NAME]
        write_training_states(files.run_dir, [state_entry(cfg.trainer, 0, state, SFT_STATE_NAME), *index])
    result = {"steps": done, "total_steps": total, "ended": reason, "state": state, "sampler_weights": sampler_path}
    atomic_write_text(files.sft_result, json.dumps(result, indent=1) + "\n")
    logger.info("supervised stage ended (%s) after %d/%d steps: state %s", reason, done, total, state)
    return ExitCode.OK


Publish = Callable[[str], Awaitable[str]]
Evaluate = Callable[[int], Awaitable[dict[str, Any] | None]]


@asynccontextmanager
async def served(
    cfg: RunConfig,
    training: TrainingBackend,
    samplers: SamplerSource,
    env: HermesAgentBaseEnv,
    files: RunFiles,
    stop: asyncio.Event,
    prompt: list[int],
) -> AsyncIterator[tuple[Publish, Evaluate]]:
    """The run's inference server on its port while the stage lasts: `publish` saves the adapter
    and serves it from the run's samplers (vLLM's server under `trainer.sampler: vllm`); `evaluate`
    runs the environment's evaluation against it, tagged as the stage's (None when `stop` cut it
    short), the server's decode step timed on `prompt` before the first."""
    from tinker_atropos.inference_server import SamplerHolder, build_app, serve_in_thread
    from tinker_atropos.reply_cap import served_cap

    holder = SamplerHolder()
    cap = served_cap(cfg.trainer.base_model, cfg.trainer.max_reply_tokens)
    name = str(cfg.openai[0].get("model_name") or cfg.trainer.base_model) if cfg.openai else cfg.trainer.base_model
    app = build_app(holder, name, training.get_tokenizer(), cap)
    server = serve_in_thread(app, "127.0.0.1", cfg.trainer.inference_port)  # PortBindError: exit PORT

    async def publish(label: str) -> str:
        path = await training.save_weights_for_sampler_async(label)
        holder.swap(await samplers.for_weights(path, label), label)
        return path

    timed = False

    async def timed_evaluation() -> None:
        nonlocal timed
        if not timed:
            await time_decoding(holder.current()[0], prompt, workload(env.config, None).rows)
            timed = True
        if env.validation_set():  # its periodic evaluate() scores the validation set: the stage's are held-out
            await env.evaluate_set(env.held_out_set(), "held_out")
        else:
            await env.evaluate()

    async def evaluate(step: int) -> dict[str, Any] | None:
        env.eval_tags = {"stage": "sft", "sft_step": step}
        if not await unless_stopped(timed_evaluation(), stop):
            return None
        rows = [r for r in read_jsonl(files.evals) if r.get("stage") == "sft" and r.get("sft_step") == step]
        return rows[-1] if rows else None

    try:
        yield publish, evaluate
    finally:
        stop_server_checks(env)  # no evaluation comes after this: checking a stopped server fails
        await asyncio.to_thread(server.stop)


async def time_decoding(sampler: SamplingBackend, prompt: list[int], rows: int) -> None:
    """Decode a few tokens of `prompt` at the `rows` the requests' timeouts are fitted for, so the
    server's /health has a measured step before the first request: each one gets a timeout fitted
    to its work, where an unmeasured server leaves the environment's own, which a long reply
    outlives and is then asked again from nothing (`request_timeouts.py`)."""
    if getattr(sampler, "decoding", None) is None:
        return  # a service's sampler (Tinker) is not timed here: its requests keep their own timeout
    params = types.SamplingParams(max_tokens=TIMED_TOKENS, temperature=1.0)
    await sampler.sample_async(types.ModelInput.from_ints(prompt), rows, params)


async def unless_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run `work` to its end (True), or cancel it as soon as `stop` is set (False): an evaluation's
    requests end with it, and its clean-up (sandboxes, connections) runs before the stage saves."""
    task = asyncio.ensure_future(work)
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((task, stopping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait((task,))
    if task.cancelled():
        return False
    task.result()  # its error, raised here
    return True


def _log_step(files: RunFiles, step: int, total: int, made: SftStep, seconds: float) -> None:
    row = {"step": step, "total_steps": total, "loss": made.loss, "trained_tokens": made.trained_tokens}
    append_jsonl(
        files.sft_steps, {**row, "grad_norm": made.grad_norm, "seconds": round(seconds, 3), "time": time.time()}
    )
    logger.info("sft step %d/%d loss=%.4f tokens=%d", step, total, made.loss or float("nan"), made.trained_tokens)


if __name__ == "__main__":
    raise SystemExit(main())
