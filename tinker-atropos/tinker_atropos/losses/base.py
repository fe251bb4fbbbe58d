"""What a loss module provides: its Datum inputs, its loss_fn_config keys with Tinker's defaults, the
run config's fields it reads, its per-token math, and how it runs on the Tinker SDK's services.

The math works on torch tensors through their methods alone, so a run config can name a loss without
torch being imported: the local backend computes it on padded [rows, time] tensors, and the Tinker
path on one datum's logprobs where the service has no built-in of the same math (`on_tinker.py`).
lp is the trainer's logprob of each target token, q the sampler's (`logprobs`), A the advantages.
Every loss is a sum over tokens, as Tinker's: the caller scales the advantages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, ClassVar, Literal, Protocol

if TYPE_CHECKING:
    import torch
    from tinker import types

# How a service runs a loss: its built-in of the same name, or two passes of its own (forward, then
# importance_sampling at ratio 1 with the loss's gradient as the advantages: on_tinker.py)
Way = Literal["builtin", "two_passes"]


class RunSettings(Protocol):
    """What the losses read of the run's config (trainer/config.py's TinkerConfig)."""

    loss_aggregation: str
    clip_low: float | None
    clip_high: float | None
    dro_beta: float


class Loss:
    name: ClassVar[str]
    summary: ClassVar[str]  # its clause in the description of `loss_fn`
    inputs: ClassVar[tuple[str, ...]] = ("target_tokens", "logprobs", "advantages")
    defaults: ClassVar[dict[str, float | None]] = {}  # loss_fn_config keys, Tinker's defaults (None: required)
    fields: ClassVar[tuple[str, ...]] = ()  # the run config's fields (beyond loss_fn) it reads
    on_tinker: ClassVar[Way] = "builtin"
    on_self_hosted: ClassVar[Way] = "builtin"  # a SkyRL engine's

    def per_token(self, lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], cfg: Mapping[str, float]) -> torch.Tensor:
        """The loss at each token (before `weights`)."""
        raise NotImplementedError

    def signal(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """Where it can have a gradient, beyond `weights` (None: anywhere): A != 0."""
        return inputs["advantages"] != 0 if "advantages" in inputs else None

    def settings(self, t: RunSettings, factor: float) -> dict[str, float] | None:
        """Its loss_fn_config from the run's config, every key explicit (Tinker's and SkyRL's defaults
        differ); `factor`: the step's aggregation factor, where it is one for the whole step."""
        return None

    def refusal(self, t: RunSettings) -> str | None:
        """Why the run's config cannot train with it, if it cannot."""
        return None

    def datums(self, datums: Sequence[types.Datum]) -> list[types.Datum]:
        """The trainer's datums (target_tokens, logprobs, advantages) as it takes them."""
        return list(datums)

    def config(self, given: Mapping[str, float] | None = None) -> dict[str, float]:
        """`given` over its defaults; ValueError on an unknown or missing key or crossed clip bounds, so a
        run refuses its config before its first step."""
        given = dict(given or {})
        unknown = sorted(set(given) - set(self.defaults))
        if unknown:
            raise ValueError(f"loss_fn {self.name!r} takes loss_fn_config keys {sorted(self.defaults)}, not {unknown}")
        merged = {**self.defaults, **given}
        missing = sorted(k for k, v in merged.items() if v is None)
        if missing:
            raise ValueError(f"loss_fn {self.name!r} needs loss_fn_config {missing} (no default)")
        out = {k: float(v) for k, v in merged.items() if v is not None}
        if out.get("clip_low_threshold", 0.0) > out.get("clip_high_threshold", float("inf")):
            raise ValueError(f"loss_fn {self.name!r}: clip_low_threshold is above clip_high_threshold ({out})")
        return out

    def elementwise(
        self, lp: torch.Tensor, inputs: Mapping[str, torch.Tensor], given: Mapping[str, float] | None = None
    ) -> torch.Tensor:
        """The loss at each token, times `weights` where the datums carry them."""
        loss = self.per_token(lp, inputs, self.config(given))
        weights = inputs.get("weights")
        return loss if weights is None else loss * weights

    def gradient_mask(self, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
        """Where it can have a gradient (None: anywhere): weights != 0 and its `signal`. The local
        backend computes (and keeps) the softmax only there, and shares a prompt's forward only before
        the first such position."""
        mask = inputs["weights"] != 0 if "weights" in inputs else None
        signal = self.signal(inputs)
        if signal is None:
            return mask
        return signal if mask is None else mask & signal
