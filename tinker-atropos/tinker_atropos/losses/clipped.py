"""What ppo and cispo share: the ratio's clip bounds, from `clip_low` / `clip_high` or the loss's defaults."""

from __future__ import annotations

from tinker_atropos.losses.base import Loss, RunSettings


class ClippedRatio(Loss):
    fields = ("clip_low", "clip_high")

    def settings(self, t: RunSettings, factor: float) -> dict[str, float] | None:
        low, high = self.defaults["clip_low_threshold"], self.defaults["clip_high_threshold"]
        assert low is not None and high is not None
        return {
            "clip_low_threshold": low if t.clip_low is None else t.clip_low,
            "clip_high_threshold": high if t.clip_high is None else t.clip_high,
        }
