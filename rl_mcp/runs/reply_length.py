"""What caps a reply's length, and the config field to change: the product's `max_reply_tokens`
where the environment asks for more than the model's context, the model's context where the
prompt leaves less than asked, else the environment's own field. Pure: config sections and the
environment's request counts (env_health.json) in, words out."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rl_mcp.runs.env_health import Requests
from tinker_atropos.reply_cap import DEFAULT_MAX_REPLY_TOKENS, ReplyCap, served_cap

CAP_FIELD = "max_reply_tokens"
_TOKEN_FIELD = re.compile(r"^max_\w*tokens?(_length)?$")  # max_token_length, max_completion_tokens, ...


@dataclass(frozen=True)
class Limit:
    """What cuts a reply: `field` is the config field to change (None: none can, the context cuts it)."""

    cut_by: str  # max_reply_tokens | context | the environment's field | max_tokens
    field: str | None
    summary: str


def served(trainer: dict[str, Any] | None) -> ReplyCap | None:
    """The cap of the product's inference server a run config's trainer section describes (None: the
    requests go to another server, e.g. rl_test_inference's remote targets)."""
    if not trainer or not trainer.get("base_model"):
        return None
    # a config written before the field existed has none: the trainer's default applies
    return served_cap(str(trainer["base_model"]), int(trainer.get(CAP_FIELD) or DEFAULT_MAX_REPLY_TOKENS))


def token_fields(env: dict[str, Any]) -> dict[str, int]:
    """The environment's fields that set tokens per reply (max_token_length, max_completion_tokens, ...)."""
    return {k: v for k, v in env.items() if _TOKEN_FIELD.match(k) and isinstance(v, int) and not isinstance(v, bool)}


def limit(asked: int | None, prompt_tokens: int | None, env: dict[str, Any], trainer: dict[str, Any] | None) -> Limit:
    """What cuts a reply to a request that asked for `asked` tokens after a prompt of `prompt_tokens`."""
    cap = served(trainer)
    context = cap.context if cap else None
    room = context - prompt_tokens if context and prompt_tokens else context
    if cap is not None and context and asked and asked > context and (room is None or cap.max_reply_tokens <= room):
        return Limit(
            CAP_FIELD,
            CAP_FIELD,
            f"the product's cap {CAP_FIELD} = {cap.max_reply_tokens} tokens a reply, applied because the environment "
            f"asks for {asked}, more than the model's {context}-token context",
        )
    if context and room is not None and asked and asked > room:
        return Limit(
            "context",
            None,
            f"the model's {context}-token context: the prompt took {prompt_tokens} tokens, leaving {room} for the "
            "reply (shorter prompts, or a model with a longer context)",
        )
    named = [k for k, v in token_fields(env).items() if v == asked]
    if named:
        return Limit(named[0], named[0], f"the environment's own {' / '.join(named)} = {asked} tokens a reply")
    if asked:
        return Limit("max_tokens", None, f"the max_tokens = {asked} the environment's code asks for")
    return Limit("max_tokens", None, "the server's default max_tokens (the environment asks for none)")


def config_note(env: dict[str, Any], trainer: dict[str, Any] | None, model: str) -> str | None:
    """rl_get_current_config's statement of the cap, where an environment field asks for more
    tokens a reply than the model's context holds."""
    cap = served(trainer)
    if cap is None or cap.context is None:
        return None
    over = {k: v for k, v in token_fields(env).items() if v > cap.context}
    if not over:
        return None
    asks = ", ".join(f"{k} = {v}" for k, v in over.items())
    return (
        f"{asks}: more tokens a reply than {model}'s {cap.context}-token context holds, so the inference server "
        f"generates at most {CAP_FIELD} = {cap.max_reply_tokens} tokens a turn (a reply cut there ends with "
        f"finish_reason 'length'); rl_edit_config {CAP_FIELD} to change it"
    )


def at_cap(requests: Requests, env: dict[str, Any], trainer: dict[str, Any] | None) -> Limit | None:
    """What cut the replies that ran to their cap, or None when none did."""
    last = requests.last_at_cap
    if not requests.replies_at_cap or last is None:
        return None
    return limit(last.asked, last.prompt_tokens, env, trainer)


def timeouts_line(requests: Requests, env: dict[str, Any], trainer: dict[str, Any] | None, now: float) -> str | None:
    """Requests that outlive the client's timeout (each retried, the work begun again), or that are in
    flight past it now, and the field that would shorten them; None when there are none."""
    timeout = requests.client_timeout_s
    age = now - requests.oldest_in_flight_at if requests.oldest_in_flight_at else 0.0
    overdue = bool(timeout and age > timeout)
    if not (requests.timeouts or requests.retries_after_timeout or overdue):
        return None
    which = limit(requests.max_asked, None, env, trainer)
    waited = f"; one has been in flight {age:.0f} s" if overdue else ""
    change = f"lower {which.field}" if which.field else "shorter replies"
    return (
        f"{requests.timeouts} request tries outlived the client's {timeout or 0:.0f} s timeout and "
        f"{requests.retries_after_timeout} were sent again by the client{waited}: "
        "each retry starts the generation over. "
        f"A reply may run to {which.summary}; on this server that takes longer than the timeout: {change}"
    )
