"""The vLLM server a run (or an inference test) samples from: its own, started beside the trainer and
stopped with it, or the one at `trainer.vllm_url` that the user runs elsewhere (adapters loaded there by
path, so that server must see this machine's files).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

from tinker_atropos.backends.base import BackendUnavailable
from tinker_atropos.models.paths import model_ref
from tinker_atropos.trainer.config import RunConfig
from tinker_atropos.venvs import nvidia_gpu, runtime_python
from tinker_atropos.vllm_server.adapters import LoadedAdapters
from tinker_atropos.vllm_server.process import VllmError, VllmProcess, VllmSpec
from tinker_atropos.vllm_server.sampler import VllmClient, VllmSampler

CONTEXT_CAP = 8192  # the longest context served: a CPU's KV cache holds a few of SmolLM2's 8192


def max_model_len(model: str, cfg: RunConfig) -> int:
    """The model's context (its config.json), at most the trainer's longest sequence and CONTEXT_CAP."""
    try:
        config = json.loads((Path(model) / "config.json").read_text())
        positions = int(config.get("max_position_embeddings") or CONTEXT_CAP)
    except (OSError, ValueError):
        positions = CONTEXT_CAP
    return min(positions, cfg.trainer.max_token_trainer_length, CONTEXT_CAP)


def free_port(host: str) -> int:
    """A port free now on `host` (vLLM binds it a few seconds later; the run's own ports come from the server)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def adapters_kept(cfg: RunConfig) -> int:
    """Adapters loaded at once: the newest, those rollouts may still sample from (the run's staleness),
    and one being loaded (a teacher's adapter is one more: `lora_slots`)."""
    return (cfg.env.max_batches_offpolicy or 1) + 2


def lora_slots(cfg: RunConfig) -> int:
    """vLLM's max_loras: the adapters kept, and a teacher's where the run has one."""
    return adapters_kept(cfg) + (1 if cfg.trainer.teacher else 0)


class VllmSamplers:
    """The run's samplers on vLLM: the base model, and each saved adapter loaded under its label."""

    def __init__(self, cfg: RunConfig, process: VllmProcess | None, url: str, length: int) -> None:
        self.cfg = cfg
        self.process = process
        self.others: list[VllmSamplers] = []  # servers of the run's for other base models (a teacher's)
        self.client = VllmClient(url)
        self.length = length
        self.adapters = LoadedAdapters(self.client, cfg.trainer.run_name, adapters_kept(cfg), length)
        self._base_name: str | None = None

    @classmethod
    def start(cls, cfg: RunConfig, log_name: str = "vllm.log") -> VllmSamplers:
        """Start the run's own server (ready later: `wait_ready`), or attach to `trainer.vllm_url`."""
        t = cfg.trainer
        model = model_ref(t.base_model)
        length = max_model_len(model, cfg)
        if t.vllm_url:
            return cls(cfg, None, t.vllm_url, length)
        python = runtime_python("vllm", os.environ)
        if not python.exists():
            raise BackendUnavailable(
                f"trainer.sampler is vllm, and the vllm runtime is not made ({python.parent.parent}): run "
                "`mcp-server-rl setup vllm` (a few minutes, once), or set tinker.sampler: engine"
            )
        spec = VllmSpec(
            python=python,
            model=model,
            served_name=t.base_model,
            port=free_port(t.inference_host),
            lora_rank=t.lora_rank,
            max_loras=lora_slots(cfg),
            max_model_len=length,
            host=t.inference_host,
            gpu=t.device == "cuda" or (t.device == "auto" and nvidia_gpu()),
        )
        process = VllmProcess(spec, Path(t.run_dir) / "logs" / log_name)
        return cls(cfg, process, process.url, length)

    async def wait_ready(self) -> None:
        """The run's own server answering; a user's server's context read from it (its --max-model-len
        may be below the model's, and requests are cut to fit it)."""
        if self.process is not None:
            try:
                await asyncio.to_thread(self.process.wait_ready)
            except VllmError as exc:
                raise BackendUnavailable(str(exc)) from exc
            return
        try:
            served = [m.get("max_model_len") for m in await self.client.models() if not m.get("parent")]
        except VllmError as exc:
            raise BackendUnavailable(
                f"trainer.vllm_url {self.client.url} cannot be asked for its models: {exc}"
            ) from exc
        if served and isinstance(served[0], int) and served[0] < self.length:
            self.length = self.adapters.max_model_len = served[0]

    async def for_weights(self, path: str, label: str) -> VllmSampler:
        return await self.adapters.serve(path, label)

    async def for_adapter(self, path: str, label: str) -> VllmSampler:
        return await self.adapters.serve(path, label, pinned=True)

    async def for_base(self) -> VllmSampler:
        if self._base_name is None:
            models = await self.client.models()
            bases = [m["id"] for m in models if not m.get("parent")]
            if not bases:
                raise VllmError(f"vLLM's server at {self.client.url} lists no base model")
            self._base_name = bases[0]
        return VllmSampler(self.client, self._base_name, self.length)

    async def start_other(self, base_model: str) -> VllmSamplers:
        """A second server of the run's own, for another base model (a teacher's), ready; stopped by close().
        Started from the caller's thread, as the run's own: the guard watches the thread that started it."""
        t = self.cfg.trainer
        tinker = t.model_copy(
            update={"base_model": base_model, "vllm_url": None, "teacher": None, "run_name": f"{t.run_name}-teacher"}
        )
        other = VllmSamplers.start(self.cfg.model_copy(update={"trainer": tinker}), log_name="vllm-teacher.log")
        self.others.append(other)
        await other.wait_ready()
        return other

    async def close(self) -> None:
        """Unload this run's adapters (a shared server keeps serving others), then stop its own servers."""
        for other in self.others:
            await other.close()
        try:
            if self.process is None:
                await self.adapters.unload_all()
        finally:
            await self.client.aclose()
            if self.process is not None:
                await asyncio.to_thread(self.process.stop)
