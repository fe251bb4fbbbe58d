"""The local backend: torch + transformers + peft on this machine."""

from .engine import BaseModel, ModelLoadError, configure_threads, load_base_model, pick_device
from .sampler import LocalSampler
from .training import LocalTrainingClient, create_sampler

__all__ = [
    "BaseModel",
    "LocalSampler",
    "LocalTrainingClient",
    "ModelLoadError",
    "configure_threads",
    "create_sampler",
    "load_base_model",
    "pick_device",
]
