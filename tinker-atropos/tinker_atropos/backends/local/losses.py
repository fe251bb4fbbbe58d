"""Tinker's built-in losses on padded [batch, time] tensors, using its Datum and loss_fn_config names.

The same math as Tinker's (tinker-docs losses pages), so the local backend can stand in for it:
lp = the trainer's logprob of the target token, q = inputs["logprobs"] (the sampler's),
A = inputs["advantages"], r = exp(lp - q), clip thresholds absolute ratio bounds.
All losses are sums over tokens (Tinker does not normalise): the caller scales advantages.
`weights`, when present, multiplies the per-token loss (cross_entropy needs it).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from tinker_atropos.backends.loss_settings import LOSS_CONFIG_DEFAULTS, LOSS_INPUTS

__all__ = ["LOSS_INPUTS", "elementwise_loss", "gradient_mask", "loss_config"]


def loss_config(loss_fn: str, config: Mapping[str, float] | None = None) -> dict[str, float]:
    """`config` over `loss_fn`'s defaults; ValueError on an unknown loss or key, a missing required
    key or crossed clip bounds, so a run can refuse its config before its first step."""
    if loss_fn not in LOSS_CONFIG_DEFAULTS:
        raise ValueError(
            f"loss_fn {loss_fn!r} is not supported by the local backend: use one of {sorted(LOSS_CONFIG_DEFAULTS)}"
        )
    defaults, given = LOSS_CONFIG_DEFAULTS[loss_fn], dict(config or {})
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(f"loss_fn {loss_fn!r} takes loss_fn_config keys {sorted(defaults)}, not {unknown}")
    merged = {**defaults, **given}
    missing = sorted(k for k, v in merged.items() if v is None)
    if missing:
        raise ValueError(f"loss_fn {loss_fn!r} needs loss_fn_config {missing} (no default)")
    out = {k: float(v) for k, v in merged.items() if v is not None}
    if out.get("clip_low_threshold", 0.0) > out.get("clip_high_threshold", float("inf")):
        raise ValueError(f"loss_fn {loss_fn!r}: clip_low_threshold is above clip_high_threshold ({out})")
    return out


def elementwise_loss(
    loss_fn: str, logprobs: torch.Tensor, inputs: Mapping[str, torch.Tensor], config: Mapping[str, float] | None = None
) -> torch.Tensor:
    """Per-token loss, same shape as `logprobs` (the trainer's logprobs of the target tokens)."""
    cfg = loss_config(loss_fn, config)
    lp = logprobs
    if loss_fn == "cross_entropy":
        loss = -lp
    elif loss_fn == "dro":
        q, adv = inputs["logprobs"], inputs["advantages"]
        # Tinker applies the penalty at every position. This product's datums carry q = 0 and A = 0
        # on prompt positions, where it would train the prompt towards lp = 0; so here it counts only
        # where the sampler gave a logprob (q != 0: the completion). The trainer refuses dro on
        # Tinker for that reason.
        penalty = torch.where(q != 0, 0.5 * cfg["beta"] * (lp - q) ** 2, torch.zeros_like(lp))
        loss = -(lp * adv - penalty)
    else:
        q, adv = inputs["logprobs"], inputs["advantages"]
        ratio = torch.exp(lp - q)
        if loss_fn == "importance_sampling":
            loss = -ratio * adv
        elif loss_fn == "ppo":
            clipped = ratio.clamp(cfg["clip_low_threshold"], cfg["clip_high_threshold"])
            loss = -torch.minimum(ratio * adv, clipped * adv)
        else:  # cispo: the clipped ratio is a constant weight on the policy gradient
            clipped = ratio.clamp(cfg["clip_low_threshold"], cfg["clip_high_threshold"]).detach()
            loss = -clipped * lp * adv
    weights = inputs.get("weights")
    return loss if weights is None else loss * weights


def gradient_mask(loss_fn: str, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
    """Where `loss_fn` can have a gradient (None: anywhere): weights != 0 and, for the policy
    losses, A != 0; dro's penalty also wherever q != 0. The local backend computes (and keeps)
    the softmax only there, and shares a prompt's forward only before the first such position."""
    mask: torch.Tensor | None = None
    if "weights" in inputs:
        mask = inputs["weights"] != 0
    if loss_fn != "cross_entropy" and "advantages" in inputs:
        signal = inputs["advantages"] != 0
        if loss_fn == "dro":
            signal = signal | (inputs["logprobs"] != 0)
        mask = signal if mask is None else mask & signal
    return mask
