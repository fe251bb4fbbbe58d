"""The rule on model requests that outlive their timeout: each try starts its reply over, so a run
whose replies cannot be generated in time makes no step, however long it waits. The finding names
the numbers (tries, retries, the timeout and how it was derived, the measured time a token) and the
value that fits: the reply tokens a request can generate in its timeout at the measured speed, or
half the group where the speed is not known yet."""

from __future__ import annotations

import math

from rl_mcp.diagnosis.facts import RunFacts
from rl_mcp.diagnosis.findings import Evidence, Finding, NextStep, Severity
from rl_mcp.diagnosis.next_steps import edit
from rl_mcp.runs.reply_length import CAP_FIELD, limit
from tinker_atropos.reply_cap import DEFAULT_MAX_REPLY_TOKENS
from tinker_atropos.request_timeouts import Policy

FIT_STEP_TOKENS = 64  # a proposed reply length is a multiple of this


def requests_time_out(facts: RunFacts) -> Finding | None:
    """Request tries that outlived the client's timeout, or that the client sent again after one."""
    r = facts.requests
    if r is None or not (r.timeouts or r.retries_after_timeout):
        return None
    timeout = r.client_timeout_s or 0.0
    how = f" ({r.client_timeout_basis})" if r.client_timeout_basis else ""
    title = (
        f"{r.timeouts} model request tries outlived their timeout and {r.retries_after_timeout} were sent again "
        f"({r.answered} answered): each try starts its reply over"
    )
    field = limit(r.max_asked, None, facts.env, facts.trainer).field
    room, now = _tokens_that_fit(facts, timeout), _current(facts, field)
    severity: Severity = "warning" if facts.metrics or not facts.active else "error"
    if room is not None and field and now is not None and room < now:
        fits = max(FIT_STEP_TOKENS, math.floor(room / FIT_STEP_TOKENS) * FIT_STEP_TOKENS)
        next_step = edit(
            field,
            fits,
            f"at the measured {(r.seconds_per_token or 0) * 1000:.1f} ms a token, {fits} tokens are what a request "
            f"generates in its {timeout:.0f} s timeout with a margin of {Policy().margin:g}x",
        )
    elif room is not None:  # they timed out before the server's speed was measured; the timeout fits now
        severity, title = "info", f"{title}; the timeout derived since holds the replies asked for"
        next_step = NextStep(
            "rl_check_status", {"run_id": facts.run_id}, "nothing to change while no new try times out"
        )
    else:
        next_step = _smaller_group(facts)
    summary = f"{r.sent} tries sent, {r.answered} answered, {r.timeouts} timed out; the timeout now {timeout:.0f} s"
    summary += how
    return Finding(
        "requests_time_out",
        severity,
        title,
        next_step,
        [Evidence("env_health.requests.timeouts", [], [float(r.timeouts)], summary)],
    )


def _tokens_that_fit(facts: RunFacts, timeout: float) -> float | None:
    """The reply tokens a request generates in `timeout` at the measured speed, with the margin the
    timeout was derived with (None: not measured)."""
    r, policy = facts.requests, Policy()
    if r is None or not r.seconds_per_token or timeout <= policy.prefill_s:
        return None
    # + half a token: a timeout derived for N tokens gives back N only up to float rounding (1499.9999)
    return (timeout - policy.prefill_s) / (policy.margin * r.seconds_per_token) + 0.5


def _current(facts: RunFacts, field: str | None) -> int | None:
    """The run's value of the field that sets the reply tokens."""
    if field == CAP_FIELD:
        value = facts.trainer.get(CAP_FIELD, DEFAULT_MAX_REPLY_TOKENS)
    else:
        value = facts.env.get(field) if field else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _smaller_group(facts: RunFacts) -> NextStep:
    group = facts.env.get("group_size")
    if isinstance(group, int) and group > 1:
        return edit("group_size", group // 2, "fewer rows decoding at once make each reply faster on this server")
    return NextStep(
        "resources/read",
        {"uri": f"rl://runs/{facts.run_id}/logs/env"},
        "see which requests time out; shorter replies (the environment's max_token_length) make them fit",
    )
