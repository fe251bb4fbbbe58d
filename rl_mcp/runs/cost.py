"""What a run on a paid backend may spend, from its run config: the figures a user confirms.

An upper bound, not a forecast: every sequence of every step at full length
(total_steps x batch_size x max_token_length tokens). The price is the operator's
(`pricing.usd_per_million_tokens` in the profile); without one only the token budget is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from rl_mcp.settings import Profile

PAID_BACKEND = "tinker"  # the backend that bills tokens (Profile.spends_money)


@dataclass(frozen=True)
class CostFigures:
    backend: str
    model: str
    total_steps: int
    batch_size: int
    group_size: int
    max_token_length: int
    max_tokens: int
    usd_per_million_tokens: float | None
    estimated_usd: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def message(self, environment: str) -> str:
        """The confirmation question (no secret in it; identical for identical figures)."""
        cost = (
            f"estimated cost up to ${self.estimated_usd:,.2f} at ${self.usd_per_million_tokens:g} per million tokens"
            if self.estimated_usd is not None
            else "no price is configured (profile `pricing`), so only the token budget is shown"
        )
        return (
            f"Start a paid training run of {environment!r} on {self.backend} with {self.model}? "
            f"{self.total_steps} steps x {self.batch_size} sequences (groups of {self.group_size}) "
            f"x up to {self.max_token_length} tokens = a budget of up to {self.max_tokens:,} tokens; {cost}."
        )


def estimate(profile: Profile, run_config: Mapping[str, Any]) -> CostFigures:
    """The figures for a run config rendered from `profile` (see session/run_config.py)."""
    return _figures(run_config, profile.backend, profile.model, profile.usd_per_million_tokens)


def recorded_estimate(run_config: Mapping[str, Any], usd_per_million_tokens: float | None) -> CostFigures:
    """A recorded run's figures from its own config (its backend and model, whatever the profile is
    now); the operator's price applies only to a paid backend."""
    trainer = run_config.get("trainer") or {}
    backend = str(trainer.get("backend") or "")
    price = usd_per_million_tokens if backend == PAID_BACKEND else None
    return _figures(run_config, backend, str(trainer.get("base_model") or ""), price)


def usd_for(tokens: int, usd_per_million_tokens: float | None) -> float | None:
    """What `tokens` cost at the price, rounded to cents; None without a price."""
    return round(tokens / 1e6 * usd_per_million_tokens, 2) if usd_per_million_tokens is not None else None


def _figures(run_config: Mapping[str, Any], backend: str, model: str, price: float | None) -> CostFigures:
    env = run_config.get("env") or {}
    steps = int(env.get("total_steps") or 0)
    batch = int(env.get("batch_size") or 0)
    group = int(env.get("group_size") or 0)
    length = int(env.get("max_token_length") or 0)
    tokens = steps * max(batch, 0) * max(length, 0)
    return CostFigures(
        backend=backend,
        model=model,
        total_steps=steps,
        batch_size=batch,
        group_size=group,
        max_token_length=length,
        max_tokens=tokens,
        usd_per_million_tokens=price,
        estimated_usd=usd_for(tokens, price),
    )
