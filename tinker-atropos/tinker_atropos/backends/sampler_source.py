"""Where a run's samplers come from: the training backend itself (the local engine, Tinker's sampling
clients), or vLLM's server (`trainer.sampler: vllm`, tinker_atropos/vllm_server/). The trainer asks for
one after every step, for kl_beta the base model's, for a teacher its adapter's; it never knows which it got.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

from tinker_atropos.backends.base import SamplingBackend, TrainingBackend
from tinker_atropos.trainer.config import RunConfig

logger = logging.getLogger(__name__)


class SamplerSource(Protocol):
    async def for_weights(self, path: str, label: str) -> SamplingBackend:
        """A sampler for the weights saved at `path` (save_weights_for_sampler), named `label`."""
        ...

    async def for_base(self) -> SamplingBackend:
        """A sampler for the base model."""
        ...

    async def for_adapter(self, path: str, label: str) -> SamplingBackend:
        """A sampler for an adapter folder on the base model, kept for the whole run (a teacher)."""
        ...

    async def close(self) -> None: ...


class BackendSamplers:
    """Samplers the training backend makes (the default)."""

    def __init__(self, cfg: RunConfig, training: TrainingBackend) -> None:
        self.cfg = cfg
        self.training = training

    async def for_weights(self, path: str, label: str) -> SamplingBackend:
        return await self.training.create_sampling_client_async(path)

    async def for_base(self) -> SamplingBackend:
        from tinker_atropos.backends.factory import create_base_sampler

        return await asyncio.to_thread(create_base_sampler, self.cfg)

    async def for_adapter(self, path: str, label: str) -> SamplingBackend:
        from tinker_atropos.backends.factory import create_base_sampler

        return await asyncio.to_thread(create_base_sampler, self.cfg, path)

    async def close(self) -> None:
        return None


@asynccontextmanager
async def backend_and_samplers(cfg: RunConfig) -> AsyncIterator[tuple[TrainingBackend, SamplerSource]]:
    """The run's training backend and its samplers (the trainer's, the supervised stage's): with
    `trainer.sampler: vllm` vLLM's server, started from this thread (its guard watches the process that
    started it) while the backend loads, else the backend's own; both closed at the end.
    BackendUnavailable when either cannot be had."""
    from tinker_atropos.backends.factory import close_backend, create_training_backend

    vllm = None
    if cfg.trainer.sampler == "vllm":
        from tinker_atropos.vllm_server.run import VllmSamplers

        vllm = VllmSamplers.start(cfg)
    try:
        training = await asyncio.to_thread(create_training_backend, cfg)
    except BaseException:
        if vllm is not None:
            await vllm.close()
        raise
    logger.info("backend %s ready: %s", cfg.trainer.backend, cfg.trainer.base_model)
    try:
        if vllm is not None:
            await vllm.wait_ready()
            logger.info("vLLM serving %s at %s", cfg.trainer.base_model, vllm.client.url)
        yield training, vllm or BackendSamplers(cfg, training)
    finally:
        if vllm is not None:
            await vllm.close()
        await asyncio.to_thread(close_backend, training)
