"""The product's per-turn generation cap: where an environment asks one request for more tokens
than the model's context holds, the inference server generates at most `trainer.max_reply_tokens`.

hermes-agent's terminal_test_env asks 16000 tokens a turn; on SmolLM2 (8192-token context, on a
CPU) such a reply ran to the whole context in 702 s, and every chat request of the run that
followed outlived its client's 120 s timeout. An environment that asks for less than the context
gets what it asks for. Stdlib only: the MCP server states the cap (rl_get_current_config) from
the same facts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tinker_atropos.models.paths import model_ref

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length")
# tinker.max_reply_tokens' default: 1024 SmolLM2 tokens take about 90 s on a CPU (8192 took 702 s),
# inside the profiles' 120 s request timeout.
DEFAULT_MAX_REPLY_TOKENS = 1024


def context_tokens(model: str | Path | None) -> int | None:
    """The context of the model whose folder is `model` (its config.json); None for a hub id, a
    folder not built yet or one that does not say."""
    if not model:
        return None
    try:
        config = json.loads((Path(model) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    for key in CONTEXT_KEYS:
        value = config.get(key) if isinstance(config, dict) else None
        if isinstance(value, int) and value > 0:
            return value
    return None


@dataclass(frozen=True)
class ReplyCap:
    """The served model's context (None: unknown, nothing is capped) and the cap past it."""

    context: int | None
    max_reply_tokens: int

    def limit(self, asked: int) -> int:
        """The tokens a request that asks for `asked` may generate."""
        if self.context is None or asked <= self.context:
            return asked
        return min(asked, self.max_reply_tokens)


def served_cap(base_model: str, max_reply_tokens: int) -> ReplyCap:
    """The cap of an inference server serving `base_model` (an offline model's context is read from
    its folder; a hub model's is unknown here, so nothing is capped)."""
    return ReplyCap(context_tokens(model_ref(base_model)), max_reply_tokens)
