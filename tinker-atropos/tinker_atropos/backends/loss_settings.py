"""Tinker's built-in losses by name: the Datum inputs each takes and its loss_fn_config keys with
Tinker's defaults (stdlib: the trainer sends them explicitly, the local backend computes with them)."""

from __future__ import annotations

LOSS_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens", "weights"),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
}
# Each loss's loss_fn_config keys with Tinker's defaults; None: required (no default). SkyRL's engine
# defaults cispo to 0.8-1.2, so a caller sends every key.
LOSS_CONFIG_DEFAULTS: dict[str, dict[str, float | None]] = {
    "cross_entropy": {},
    "importance_sampling": {},
    "ppo": {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2},
    "cispo": {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0},
    "dro": {"beta": None},
}
