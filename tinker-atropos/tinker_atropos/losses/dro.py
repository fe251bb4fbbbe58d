"""dro: -(logp*A - beta/2*(logp - logp_sampler)^2), its penalty only on the reply's tokens.

Tinker's built-in dro applies the penalty at every position. This product's datums carry q = 0 and
A = 0 on prompt positions, where that would train the prompt towards lp = 0; so the penalty counts
only where the sampler gave a logprob (q != 0), and on Tinker and SkyRL's engine (which has no dro)
it runs as two passes of the service's own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from tinker_atropos.losses.base import Loss, RunSettings

if TYPE_CHECKING:
    import torch


class Dro(Loss):
    name = "dro"
    summary = "dro (-(logp*A - dro_beta/2*(logp - logp_sampler)^2), the penalty on the reply's tokens)"
    defaults: ClassVar[dict[str, float | None]] = {"beta": None}
    fields = ("dro_beta",)
    on_tinker = "two_passes"
    on_self_hosted = "two_passes"

    def per_token(self, lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], cfg: Mapping[str, float]) -> torch.Tensor:
        q, adv = inputs["logprobs"], inputs["advantages"]
        penalty = (0.5 * cfg["beta"] * (lp - q) ** 2).where(q != 0, lp.new_zeros(()))
        return -(lp * adv - penalty)

    def signal(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        if "advantages" not in inputs:
            return None
        return (inputs["advantages"] != 0) | (inputs["logprobs"] != 0)

    def settings(self, t: RunSettings, factor: float) -> dict[str, float] | None:
        """Its penalty does not scale with the advantages: beta takes the step's one factor."""
        return {"beta": t.dro_beta * factor}

    def refusal(self, t: RunSettings) -> str | None:
        if t.loss_aggregation == "seq_mean":
            return (
                "loss_fn dro with loss_aggregation seq_mean cannot be computed exactly (its penalty would need a "
                "weight per reply): use sum, token_mean or constant"
            )
        return None


LOSS = Dro()
