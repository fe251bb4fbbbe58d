"""cross_entropy: -weights * logp. With the advantages as the weights it is the plain on-policy policy
gradient, -sum(A * logp); the supervised stage's weights are 1 on the reply's tokens.

A SkyRL engine divides each datum's cross-entropy by the sum of its weights, which advantages as
weights make zero or negative: there it runs as two passes of importance_sampling (on_tinker.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from tinker_atropos.losses.base import Loss

if TYPE_CHECKING:
    import torch
    from tinker import types


class CrossEntropy(Loss):
    name = "cross_entropy"
    summary = "cross_entropy (advantage-weighted log-likelihood)"
    inputs = ("target_tokens", "weights")
    on_self_hosted = "two_passes"

    def per_token(self, lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], cfg: Mapping[str, float]) -> torch.Tensor:
        return -lp

    def signal(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        return None  # the weights say where

    def datums(self, datums: Sequence[types.Datum]) -> list[types.Datum]:
        from tinker import types

        return [
            types.Datum(
                model_input=d.model_input,
                loss_fn_inputs={
                    "target_tokens": d.loss_fn_inputs["target_tokens"],
                    "weights": d.loss_fn_inputs["advantages"],
                },
            )
            for d in datums
        ]


LOSS = CrossEntropy()
