"""`launch_training.py --config X.yaml`: the inference server and the trainer, in one process.

Order: load the config -> start vLLM's server when tinker.sampler is vllm (it loads beside the
trainer's model) -> create the training backend (loads the model) -> bind the inference server on
tinker.inference_host:inference_port (its /health answers 503 until a sampler is installed) ->
register with run-api -> train. The trainer installs the first sampler right after registration, so
/health turns 200 only when the model is loaded (vLLM's too) and the run is registered.

Exit codes: `run_files.ExitCode` (docs/run-files.md). On 0 the last stdout line is
`FINAL_CHECKPOINT <path>` (a local folder or a tinker:// path). Logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path

from tinker_atropos.backends.base import TrainingBackend
from tinker_atropos.backends.sampler_source import SamplerSource, backend_and_samplers
from tinker_atropos.env_process.logs import FORMAT, quiet_http_lines
from tinker_atropos.run_files import FINAL_CHECKPOINT_MARK, ExitCode, Outcome, RunResult, finished_sft_state
from tinker_atropos.trainer.config import ConfigError, RunConfig, load_run_config
from tinker_atropos.trainer.loop import REGISTER_TIMEOUT_S, registration_for, train

logger = logging.getLogger("tinker_atropos.trainer.launch")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="launch_training.py", description="GRPO/LoRA trainer + inference server for one run"
    )
    parser.add_argument("--config", required=True, help="the run YAML (docs/run-files.md)")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=FORMAT)
    quiet_http_lines()
    try:
        cfg = load_run_config(args.config)
        registration_for(cfg)  # validates the env fields the trainer needs
    except ConfigError as exc:
        logger.error("invalid config: %s", exc)
        return ExitCode.CONFIG
    try:
        return asyncio.run(_launch(cfg))
    except Exception as exc:
        logger.exception("training failed")
        _failed(cfg, f"{type(exc).__name__}: {exc}").write(Path(cfg.trainer.run_dir))
        return ExitCode.ERROR


async def _launch(cfg: RunConfig) -> int:
    from tinker_atropos.backends.factory import BackendUnavailable

    run_dir = Path(cfg.trainer.run_dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _on_signal, sig, stop)

    def fail(code: int, message: str) -> int:
        logger.error("%s", message)
        _failed(cfg, message).write(run_dir)
        return code

    cfg = after_supervised_stage(cfg)
    async with AsyncExitStack() as stack:
        try:
            training, samplers = await stack.enter_async_context(backend_and_samplers(cfg))
        except BackendUnavailable as exc:
            return fail(ExitCode.BACKEND, f"backend unavailable: {exc}")
        return await _serve_and_train(cfg, training, stop, fail, samplers)


async def _serve_and_train(
    cfg: RunConfig,
    training: TrainingBackend,
    stop: asyncio.Event,
    fail: Callable[[int, str], int],
    samplers: SamplerSource,
) -> int:
    """The inference server, registration with run-api and the training loop, on a loaded backend."""
    from tinker_atropos.inference_server import (
        PortBindError,
        SamplerHolder,
        build_app,
        serve_in_thread,
    )
    from tinker_atropos.reply_cap import served_cap
    from tinker_atropos.trainer.run_api_client import RunApiClient, RunApiUnavailable

    holder = SamplerHolder()
    cap = served_cap(cfg.trainer.base_model, cfg.trainer.max_reply_tokens)
    app = build_app(holder, _served_model_name(cfg), training.get_tokenizer(), cap)
    try:
        server = serve_in_thread(app, cfg.trainer.inference_host, cfg.trainer.inference_port)
    except PortBindError as exc:
        return fail(ExitCode.PORT, str(exc))
    logger.info("inference server on %s (waiting for the first sampler)", server.url)

    api = RunApiClient(cfg.trainer.api_url)
    try:
        try:
            timeout_s = float(os.environ.get("TINKER_ATROPOS_REGISTER_TIMEOUT_S", REGISTER_TIMEOUT_S))
            await api.register(registration_for(cfg), timeout_s=timeout_s)
        except RunApiUnavailable as exc:
            return fail(ExitCode.RUN_API, str(exc))
        logger.info("registered with run-api at %s", cfg.trainer.api_url)
        result = await train(cfg, training=training, api=api, holder=holder, stop=stop, samplers=samplers)
    finally:
        await api.aclose()
        await asyncio.to_thread(server.stop)
    logger.info("run %s after %d steps: %s", result.status, result.steps, result.final_checkpoint)
    if result.status == Outcome.FAILED:
        return ExitCode.ERROR
    print(f"{FINAL_CHECKPOINT_MARK} {result.final_checkpoint}", flush=True)
    return ExitCode.OK


def after_supervised_stage(cfg: RunConfig) -> RunConfig:
    """RL starts from the state the run's supervised stage left (tinker_atropos.sft), on the same
    adapter, unless the run resumes from a state of its own."""
    state = finished_sft_state(Path(cfg.trainer.run_dir))
    if cfg.trainer.resume_from or not cfg.env.sft or state is None:
        return cfg
    logger.info("starting from the supervised stage's state %s", state)
    return cfg.model_copy(update={"trainer": cfg.trainer.model_copy(update={"resume_from": state})})


def _on_signal(sig: signal.Signals, stop: asyncio.Event) -> None:
    if not stop.is_set():
        logger.info("%s received: finishing the current step, then saving", sig.name)
    stop.set()


def _served_model_name(cfg: RunConfig) -> str:
    """The model name environments ask for: the first openai entry's, else the base model."""
    for server in cfg.openai:
        if server.get("model_name"):
            return str(server["model_name"])
    return cfg.trainer.base_model


def _failed(cfg: RunConfig, message: str) -> RunResult:
    return RunResult(
        status=Outcome.FAILED,
        steps=0,
        final_checkpoint=None,
        final_state=None,
        backend=cfg.trainer.backend,
        error=message,
    )


if __name__ == "__main__":
    sys.exit(main())
