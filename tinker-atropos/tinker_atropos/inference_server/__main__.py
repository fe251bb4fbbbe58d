"""Standalone: serve the base model (or one adapter) with no trainer, e.g. for rl_test_inference.

    python -m tinker_atropos.inference_server --config X.yaml [--adapter PATH] [--log-requests]

A self-hosted engine's checkpoint (`--adapter tinker://M/C` with tinker.self_hosted on the local
backend) is downloaded from tinker.tinker_base_url first and sampled here (export/engine_weights.py).

Binds tinker.inference_host:tinker.inference_port at once; /health answers 503 while the sampler
loads, then 200. Exit codes as launch_training: 2 bad config, 3 backend unavailable, 5 port
taken, 1 other load failure.
SIGTERM/SIGINT shut down gracefully and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, NoReturn

log = logging.getLogger("tinker_atropos.inference_server")


def _tokenizer(cfg: Any) -> Any:
    from transformers import AutoTokenizer

    from tinker_atropos.models import resolve_model

    name = cfg.env.tokenizer_name or resolve_model(cfg.trainer.base_model)
    return AutoTokenizer.from_pretrained(name)


def _engine_checkpoint(cfg: Any, adapter: str | None, folder: Path) -> str | None:
    """A self-hosted engine's sampler checkpoint (tinker:// with tinker.self_hosted, sampled by
    the local backend), downloaded into `folder` as a PEFT adapter; None for any other adapter."""
    t = cfg.trainer
    if not (adapter and adapter.startswith("tinker://") and t.self_hosted and t.backend == "local"):
        return None
    from tinker_atropos.backends.base import BackendUnavailable
    from tinker_atropos.backends.local import ModelLoadError, load_base_model
    from tinker_atropos.export.engine_weights import download_engine_weights, untie_output_head

    log.info("downloading %s from the self-hosted engine at %s", adapter, t.tinker_base_url)
    path = download_engine_weights(adapter, folder / "adapter", t.tinker_base_url, t.base_model)
    try:  # the sampler merges the adapter into this cached base: the embedding LoRA must not reach a tied head
        untie_output_head(load_base_model(t.base_model, t.device).model, path)
    except ModelLoadError as exc:
        raise BackendUnavailable(str(exc)) from exc
    return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tinker_atropos.inference_server")
    parser.add_argument("--config", required=True, help="the run YAML (trainer section used)")
    parser.add_argument("--adapter", help="serve this sampler checkpoint instead of the base model")
    parser.add_argument(
        "--log-requests", action="store_true", help="log each OpenAI request with the weights that served it"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from tinker_atropos.backends.factory import BackendUnavailable, create_base_sampler
    from tinker_atropos.inference_server import PortBindError, SamplerHolder, build_app
    from tinker_atropos.inference_server.serve import bind_socket, make_server
    from tinker_atropos.reply_cap import served_cap
    from tinker_atropos.trainer.config import ConfigError, load_run_config

    try:
        cfg = load_run_config(args.config)
    except ConfigError as exc:
        log.error("invalid config: %s", exc)
        return 2
    host, port = cfg.trainer.inference_host, cfg.trainer.inference_port
    try:
        sock = bind_socket(host, port)  # bind first: a taken port fails before any model load
    except PortBindError as exc:
        log.error("%s", exc)
        return 5
    holder = SamplerHolder()
    model_name = cfg.openai[0].get("model_name") if cfg.openai else None
    model_name = model_name or cfg.trainer.base_model
    cap = served_cap(cfg.trainer.base_model, cfg.trainer.max_reply_tokens)
    server = make_server(build_app(holder, model_name, _tokenizer(cfg), cap, log_requests=args.log_requests))
    failure: dict[str, int] = {}
    vllm: list[Any] = []  # the VllmSamplers this server started or attached to (trainer.sampler vllm)

    def load() -> None:
        """Load in the background: /health answers 503 until the sampler is in."""
        from tinker_atropos.export.engine_weights import EngineWeightsError
        from tinker_atropos.vllm_server.process import VllmError

        try:
            with tempfile.TemporaryDirectory(prefix="rl-mcp-engine-weights-") as tmp:
                adapter = _engine_checkpoint(cfg, args.adapter, Path(tmp)) or args.adapter
                if cfg.trainer.sampler == "vllm":
                    holder.swap(_vllm_sampler(cfg, adapter, vllm))
                else:
                    sampler = create_base_sampler(cfg, adapter)  # merged in: the folder is not needed after
                    if adapter != args.adapter:  # downloaded: the log names the engine's checkpoint, not a gone folder
                        sampler.path = args.adapter
                    holder.swap(sampler)
            log.info("sampler ready: %s", args.adapter or cfg.trainer.base_model)
        except (BackendUnavailable, EngineWeightsError, VllmError) as exc:
            log.error("backend unavailable: %s", exc)
            failure["code"] = 3
        except Exception:
            log.exception("cannot load the sampler")
            failure["code"] = 1
        if failure:
            server.should_exit = True

    # uvicorn re-raises the signal after its graceful shutdown; make that a clean exit.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    threading.Thread(target=load, name="sampler-load", daemon=True).start()
    log.info("serving %s on http://%s:%d", model_name, host, sock.getsockname()[1])
    try:
        server.run(sockets=[sock])
    finally:
        for samplers in vllm:
            asyncio.run(samplers.close())
    return failure.get("code", 0)


def _vllm_sampler(cfg: Any, adapter: str | None, started: list[Any]) -> Any:
    """The base model or `adapter` on vLLM's server (this process's own, or tinker.vllm_url's). On a shared
    server the adapter's name carries this server's port: the run training there, another checkpoint of
    it served or tested beside this one, each loads its own name (a name loaded twice is refused)."""
    from tinker_atropos.vllm_server.run import VllmSamplers

    samplers = VllmSamplers.start(cfg)
    started.append(samplers)

    async def ready() -> Any:
        await samplers.wait_ready()
        if adapter is None:
            return await samplers.for_base()
        label = f"{Path(adapter).name}-port{cfg.trainer.inference_port}"
        return await samplers.for_weights(str(Path(adapter).resolve()), label)

    return asyncio.run(ready())


def exit_without_teardown(code: int | str | None) -> NoReturn:
    """Exit with `code` once the logs are flushed, skipping the interpreter's teardown: collecting torch's
    objects took 1.7-3.7 s of a stop on a 2-core machine (0.2 s without), and on a busy one past the 5 s a
    served model's stop waits before SIGKILL, which leaves its adapter loaded in a shared vLLM. main() has
    released what it holds (its vLLM adapters unloaded, its own vLLM stopped) by now."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0 if code is None else 1)


if __name__ == "__main__":
    try:
        exit_code: int | str | None = main()
    except SystemExit as stopped:  # SIGTERM/SIGINT, once main() has shut down
        exit_code = stopped.code
    exit_without_teardown(exit_code)
