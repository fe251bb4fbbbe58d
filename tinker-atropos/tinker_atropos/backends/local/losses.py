"""Tinker's built-in losses on padded [batch, time] tensors, using its Datum field names.

All losses are sums over tokens (Tinker does not normalise): the caller scales advantages.
`weights`, when present, multiplies the per-token loss (cross_entropy needs it).
"""

from __future__ import annotations

import torch

PPO_CLIP_LOW, PPO_CLIP_HIGH = 0.8, 1.2
LOSS_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
}


def elementwise_loss(loss_fn: str, logprobs: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Per-token loss, same shape as `logprobs` (the trainer's logprobs of the target tokens)."""
    if loss_fn == "cross_entropy":
        loss = -logprobs
    elif loss_fn == "importance_sampling":
        ratio = torch.exp(logprobs - inputs["logprobs"])
        loss = -ratio * inputs["advantages"]
    elif loss_fn == "ppo":
        ratio = torch.exp(logprobs - inputs["logprobs"])
        adv = inputs["advantages"]
        clipped = ratio.clamp(PPO_CLIP_LOW, PPO_CLIP_HIGH)
        loss = -torch.minimum(ratio * adv, clipped * adv)
    else:
        raise ValueError(f"loss_fn {loss_fn!r} is not supported by the local backend: use one of {sorted(LOSS_INPUTS)}")
    weights = inputs.get("weights")
    return loss if weights is None else loss * weights
