"""importance_sampling: -ratio * A, unclipped (Tinker's default policy loss)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from tinker_atropos.losses.base import Loss

if TYPE_CHECKING:
    import torch


class ImportanceSampling(Loss):
    name = "importance_sampling"
    summary = "importance_sampling (-ratio*A, unclipped)"

    def per_token(self, lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], cfg: Mapping[str, float]) -> torch.Tensor:
        return -(lp - inputs["logprobs"]).exp() * inputs["advantages"]


LOSS = ImportanceSampling()
