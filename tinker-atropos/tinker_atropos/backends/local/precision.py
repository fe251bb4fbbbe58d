"""`local_compute`: float32, or mixed bfloat16 for both the trainer and the sampler.

Mixed means what torch's autocast does: matmuls in bfloat16, the residual stream, norms and
softmaxes in float32. The output head stays float32 on both sides: rounding 49k logits to
bfloat16 doubled the sampler-trainer logprob gap (SmolLM2, 2 cores: mean 0.030 -> 0.014 nats a
token), for a fifth of the matmul work. The sampler's copy is frozen, so its other linear weights
are cast once instead of at every decode step; the trainer keeps float32 master weights.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from transformers import PreTrainedModel


def compute_dtype(compute: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for a `local_compute` setting (None: float32). bfloat16 without native
    support is emulated, slower than float32, so `auto` takes it only where it is native."""
    if compute == "bfloat16":
        return torch.bfloat16
    if compute == "auto":
        native = (
            torch.cuda.is_bf16_supported()
            if device.type == "cuda"
            else torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
        )
        return torch.bfloat16 if native else None
    return None


def mixed(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
    """Autocast to `dtype` on `device` (None: a no-op). Autocast is per thread: enter it on the
    thread that runs the model."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def float32_head(model: PreTrainedModel) -> None:
    """Run the output head in float32 even under autocast (before peft wraps the model: peft's
    all-linear leaves the head alone)."""
    head = model.get_output_embeddings()
    inner: Callable[[torch.Tensor], torch.Tensor] = head.forward
    device = head.weight.device.type

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device, enabled=False):
            return inner(hidden.float())

    head.forward = forward


def for_sampling(model: PreTrainedModel, dtype: torch.dtype | None) -> None:
    """Prepare a frozen sampler copy for `dtype`: linear weights cast once, the head in float32."""
    if dtype is None:
        return
    float32_head(model)
    head = model.get_output_embeddings()
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module is not head:
            module.weight = torch.nn.Parameter(module.weight.detach().to(dtype), requires_grad=False)
