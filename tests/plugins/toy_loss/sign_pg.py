"""A toy policy loss from outside the product: the policy gradient of each reply token with the sign
of its advantage alone, -sign(A) * logp. Registered as `sign_pg` in the `rl_mcp.losses` entry-point
group (pyproject.toml); neither Tinker nor SkyRL's engine has it, so there it runs as two passes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tinker_atropos.losses.base import Loss


class SignPolicyGradient(Loss):
    name = "sign_pg"
    summary = "sign_pg (-sign(A)*logp: a plugin's)"
    on_tinker = "two_passes"
    on_self_hosted = "two_passes"

    def per_token(self, lp: Any, inputs: Mapping[str, Any], cfg: Mapping[str, float]) -> Any:
        return -inputs["advantages"].sign() * lp
