"""A step's objective beyond its loss's form (tinker_atropos/losses/): how its tokens add up
(`loss_aggregation`) and the KL penalty to the base model (`kl_beta`).

Tinker sums every loss over tokens. Each aggregation is a factor c per reply (sum 1; token_mean 1 / the
step's reply tokens; seq_mean 1 / (replies x the reply's tokens); constant 1 / (replies x the reply token
budget)), and multiplying a reply's advantages by c multiplies its loss by c exactly for the losses that
are linear in the advantages: importance_sampling, ppo, cispo and cross_entropy's advantage weights. dro's
penalty does not scale with them: its beta is scaled by the same c (its settings), which is exact where c
is one for the whole step (dro refuses seq_mean). The same datums go to every backend: the math is
Tinker's, and a SkyRL engine's means are turned into its sum where the loss is sent (losses/on_tinker.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tinker import types


def aggregation_factors(masks: Sequence[np.ndarray], how: str, budget: int) -> list[float]:
    """Each reply's factor for `how` (`masks`: the replies' completion targets; `budget`: the reply
    token budget of `constant`)."""
    counts = [max(int(m.sum()), 1) for m in masks]
    n = len(counts)
    if how == "sum" or not n:
        return [1.0] * n
    if how == "token_mean":
        return [1.0 / sum(counts)] * n
    if how == "seq_mean":
        return [1.0 / (n * c) for c in counts]
    if how == "constant":
        return [1.0 / (n * max(budget, 1))] * n
    raise ValueError(f"loss_aggregation {how!r}: use sum, seq_mean, token_mean or constant")


def with_kl_penalty(
    datums: list[types.Datum], masks: Sequence[np.ndarray], reference: Sequence[np.ndarray], beta: float
) -> list[types.Datum]:
    """Each reply token's advantage less beta x (its sampler logprob - the base model's): the KL to the
    base model in the reward, as tinker-cookbook puts it (exact for what it defines, on any loss)."""
    out = []
    for datum, mask, ref in zip(datums, masks, reference):
        sampled = datum.loss_fn_inputs["logprobs"].to_numpy()
        penalty = np.where(mask, beta * (sampled - ref), 0.0).astype(np.float32)
        out.append(with_advantages(datum, datum.loss_fn_inputs["advantages"].to_numpy() - penalty))
    return out


def aggregated(datums: list[types.Datum], factors: Sequence[float]) -> list[types.Datum]:
    """The datums with each reply's advantages multiplied by its factor."""
    return [
        d if f == 1.0 else with_advantages(d, d.loss_fn_inputs["advantages"].to_numpy() * np.float32(f))
        for d, f in zip(datums, factors)
    ]


def with_advantages(datum: types.Datum, advantages: np.ndarray) -> types.Datum:
    inputs = dict(datum.loss_fn_inputs)
    inputs["advantages"] = types.TensorData.from_numpy(advantages.astype(np.float32, copy=False))
    return types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)
