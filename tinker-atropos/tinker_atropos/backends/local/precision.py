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
        return torch.bfloat16 if native_bfloat16(device) else None
    return None


def native_bfloat16(device: torch.device) -> bool:
    """Whether `device` computes bfloat16 natively (CPUs: AVX-512 BF16 or AMX)."""
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def emulation_warning(compute: str, device: torch.device) -> str | None:
    """What to tell a user who asked for bfloat16 where it is emulated (AVX2-only CPUs): there a
    bfloat16 matmul is many times slower than float32."""
    if compute != "bfloat16" or native_bfloat16(device):
        return None
    return (
        f"local_compute 'bfloat16' is emulated on this {device.type} (no AVX-512 BF16 or AMX): "
        "training and sampling run many times slower than in float32; set local_compute to 'auto' or 'float32'"
    )


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
