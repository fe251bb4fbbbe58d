"""ppo: the importance ratio clipped to its bounds, the smaller of the clipped and unclipped terms."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from tinker_atropos.losses.clipped import ClippedRatio

if TYPE_CHECKING:
    import torch


class Ppo(ClippedRatio):
    name = "ppo"
    summary = "ppo (the ratio clipped to clip_low..clip_high, 0.8-1.2 unless set)"
    defaults: ClassVar[dict[str, float | None]] = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}

    def per_token(self, lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], cfg: Mapping[str, float]) -> torch.Tensor:
        adv = inputs["advantages"]
        ratio = (lp - inputs["logprobs"]).exp()
        clipped = ratio.clamp(cfg["clip_low_threshold"], cfg["clip_high_threshold"])
        return -(ratio * adv).minimum(clipped * adv)


LOSS = Ppo()
