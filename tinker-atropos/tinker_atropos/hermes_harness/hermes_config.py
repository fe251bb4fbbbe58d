"""What makes hermes-agent 0.19 use a model at a local OpenAI-compatible URL, headless: its config.yaml
and HERMES_HOME (stdlib and PyYAML: rl_serve_model's answer and each training episode write the same).

Measured on 0.19.0 (2026-12-07): Hermes refuses a model whose context is under 64,000 tokens and
compresses a conversation only past that floor, so `model.context_length` states HERMES_CONTEXT (the
server itself never samples past the model's real window: it clamps a reply, refuses a prompt that fills
it). Hermes sends no temperature: `extra_body` keys go at the top of every request body. Approvals off
(no one answers a prompt headless), no title request, no bundled skills (`.no-bundled-skills`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tinker_atropos.run_files import HERMES_CONFIG

HERMES_CONTEXT = 65536  # the least `model.context_length` Hermes 0.19 accepts (its minimum: 64,000)
NO_SKILLS = ".no-bundled-skills"


def provider_config(model: str, url: str, api_key: str, extra_body: dict[str, Any]) -> dict[str, Any]:
    """The keys that point Hermes at `model` served at `url` (…/v1)."""
    return {
        "model": {"provider": "openai", "default": model, "context_length": HERMES_CONTEXT},
        "providers": {"openai": {"api": url, "api_key": api_key, "discover_models": False, "extra_body": extra_body}},
        "approvals": {"mode": "off"},
        "auxiliary": {"title_generation": {"enabled": False}},
    }


def episode_config(
    model: str, url: str, api_key: str, *, max_turns: int, temperature: float, max_tokens: int | None
) -> dict[str, Any]:
    """One training episode's Hermes: the provider block with the episode's key and sampling, its turn
    limit, and nothing that outlives the episode or sends requests of its own (memory, its review,
    checkpoints)."""
    body: dict[str, Any] = {"temperature": temperature}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens  # Hermes asks 65536; the episode's own cap per turn
    return {
        **provider_config(model, url, api_key, body),
        "agent": {"max_turns": max_turns},
        "memory": {"memory_enabled": False, "user_profile_enabled": False},
        "checkpoints": {"enabled": False},
    }


def config_yaml(config: dict[str, Any]) -> str:
    """A config as Hermes reads it (strings such as `off` quoted: YAML would read them as false)."""
    return yaml.safe_dump(config, sort_keys=False)


def write_home(home: Path, config: dict[str, Any]) -> Path:
    """A HERMES_HOME holding only `config`: Hermes run with it uses that model and nothing of the user's."""
    home.mkdir(parents=True, exist_ok=True)
    tmp = home / f".{HERMES_CONFIG}.tmp"
    tmp.write_text(config_yaml(config))
    tmp.replace(home / HERMES_CONFIG)
    (home / NO_SKILLS).touch()
    return home
