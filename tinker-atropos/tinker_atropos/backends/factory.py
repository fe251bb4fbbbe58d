"""Backend selection from the run config. Failures to reach or load a backend raise
`BackendUnavailable` (base.py), which launch_training turns into exit code 3."""

from __future__ import annotations

import logging

from ..trainer.config import RunConfig
from .base import BackendUnavailable, SamplingBackend, TrainingBackend

logger = logging.getLogger(__name__)


def create_training_backend(cfg: RunConfig) -> TrainingBackend:
    """A LoRA training client for `cfg.trainer` (resumed from `trainer.resume_from` when set)."""
    t = cfg.trainer
    if t.backend == "tinker":
        from .tinker_backend import create_tinker_training_client

        return create_tinker_training_client(t)
    from .local import LocalTrainingClient

    client = LocalTrainingClient(
        _local_base(cfg), t.lora_rank, t.run_dir, t.run_name, seed=t.seed, compute=t.local_compute
    )
    if t.resume_from:
        try:
            client.load_state(t.resume_from)
        except (OSError, ValueError) as exc:
            raise BackendUnavailable(f"cannot resume from tinker.resume_from={t.resume_from!r}: {exc}") from exc
    return client


def create_base_sampler(cfg: RunConfig, adapter: str | None = None) -> SamplingBackend:
    """A sampler for the base model, or for `adapter` (a sampler_weights folder / tinker:// path)."""
    if cfg.trainer.backend == "tinker":
        from .tinker_backend import create_tinker_sampler

        return create_tinker_sampler(cfg.trainer, adapter)
    from .local import create_sampler

    try:
        return create_sampler(_local_base(cfg), adapter, cfg.trainer.local_compute, seed=cfg.trainer.seed)
    except (OSError, ValueError) as exc:
        raise BackendUnavailable(f"cannot load adapter {adapter!r}: {exc}") from exc


def _local_base(cfg: RunConfig):
    from .local import ModelLoadError, load_base_model

    try:
        return load_base_model(cfg.trainer.base_model, cfg.trainer.device)
    except ModelLoadError as exc:
        raise BackendUnavailable(str(exc)) from exc


def close_backend(training: TrainingBackend) -> None:
    """Release what the backend holds outside this process (a self-hosted Tinker engine's adapter
    slot: TinkerTrainingClient.close). A backend without close() holds nothing there."""
    close = getattr(training, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:  # the run's outcome is decided already; a failed release must not change it
        logger.exception("could not release the training backend")
