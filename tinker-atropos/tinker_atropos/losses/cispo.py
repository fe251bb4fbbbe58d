"""cispo: the clipped ratio a constant weight on the policy gradient, so every token keeps a gradient
(truncated importance sampling)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from tinker_atropos.losses.clipped import ClippedRatio

if TYPE_CHECKING:
    import torch


class Cispo(ClippedRatio):
    name = "cispo"
    summary = (
        "cispo (-clip(ratio)*logp*A with the clipped ratio a weight: every token keeps a gradient; 0-4 unless set)"
    )
    # SkyRL's engine defaults cispo to 0.8-1.2: the trainer sends both keys
    defaults: ClassVar[dict[str, float | None]] = {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}

    def per_token(self, lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], cfg: Mapping[str, float]) -> torch.Tensor:
        ratio = (lp - inputs["logprobs"]).exp()
        clipped = ratio.clamp(cfg["clip_low_threshold"], cfg["clip_high_threshold"]).detach()
        return -clipped * lp * inputs["advantages"]


LOSS = Cispo()
