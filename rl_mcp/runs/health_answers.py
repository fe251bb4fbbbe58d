"""What an environment process reports (env_health.json, items.json) as the answers carry it: the groups
it discarded, the replies that ran to their cap, its requests' timeouts, its training items' draw
(rl_test_inference's, rl_check_status's and rl_get_results' answers), read from the domain's records."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from rl_mcp.from_domain import answer_from
from rl_mcp.runs.env_health import Discards, Requests
from rl_mcp.runs.item_counts import ItemCounts
from rl_mcp.runs.reply_length import Limit, at_cap, timeouts_line


class DiscardedGroups(BaseModel):
    """Rollouts whose collect_trajectories returned no group and raised nothing."""

    groups_discarded: int = Field(description="Rollouts that returned no group, in all")
    in_a_row: int = Field(description="... since the environment last scored a group")
    groups_scored: int
    scores: list[float] | None = Field(
        description="What the environment recorded for the latest discarded group's replies (Atropos' "
        "percent_correct_buffer: each reply's score or correctness); null where it keeps no such list"
    )
    sample_replies: list[str] = Field(description="The latest discarded group's replies (cut)")
    likely_cause: str | None = Field(
        description="sequences too long (past the trainer's max_token_trainer_length), equal scores or "
        "replies too short, where the group, its replies and scores show it"
    )
    usual_causes: list[str] = Field(description="What usually makes an environment discard a group, most likely first")


class RepliesAtCap(BaseModel):
    """Replies that ended at their token cap (finish_reason 'length'): cut, not finished."""

    replies_at_cap: int
    replies: int = Field(description="Replies in all")
    cut_by: str = Field(
        description="max_reply_tokens (the product's cap, where the environment asks for more than the model's "
        "context), context (the prompt left less than asked), or the environment's own field"
    )
    field: str | None = Field(description="The config field that caps them (rl_edit_config); null: none can")
    summary: str


class EnvRequests(BaseModel):
    """The environment's model requests: each try atroposlib retries counts."""

    sent: int
    answered: int
    timeouts: int = Field(description="Tries that outlived the client's timeout (atroposlib tries a request 3 times)")
    client_retries: int = Field(description="Requests the openai client sent again itself")
    client_retry_causes: dict[str, int] = Field(
        description="Those retries by what came before each: timeout, connection ERROR (the server refused or "
        "dropped it, ERROR the exception's name), status N (an HTTP error the client retries)"
    )
    client_timeout_s: float | None = Field(description="The timeout of the latest request try")
    client_timeout_basis: str | None = Field(
        None,
        description="How that timeout was derived: the reply tokens asked for, the server's measured decode "
        "speed at the rows the run schedules, the margin and bounds (null: the environment's own, unchanged)",
    )
    in_flight: int
    oldest_in_flight_s: float | None = Field(description="How long the oldest request in flight has waited")
    reply_tokens: int = Field(description="Tokens of the replies received")
    replies_at_cap: RepliesAtCap | None
    timeouts_summary: str | None = Field(description="Why requests time out and the field that would shorten them")


class TrainingItems(BaseModel):
    """The training items as the groups left them: a group whose replies all score the same teaches nothing."""

    drawn_by: str = Field(
        description="product: the draw retires solved items and defers unsolved ones; environment: the "
        "environment's own order, counted by item and left unchanged"
    )
    items: int = Field(description="Training items (environment: those seen so far)")
    active: int
    retired_solved: int = Field(description="Every reply of each of the item's last groups solved it")
    deferred_unsolved: int = Field(description="No reply of the item's last groups solved it: drawn less often")
    all_retired: bool = Field(description="Every item is solved: the run ends (ended) as completed")
    groups: int = Field(description="Groups scored")
    tied_at_top: int = Field(description="Groups whose replies all solved the item (dropped: no signal)")
    tied_at_zero: int = Field(description="Groups whose replies all scored zero (dropped: no signal)")
    tied_at_zero_refused: int = Field(
        description="... of them, groups where every reply's tool calls or actions failed (no valid action)"
    )
    tied_other: int = Field(description="Groups whose replies all scored the same value in between (dropped)")
    stopped_at_probe: int = Field(
        description="... of the tied groups, those stopped at their first replies (probe_replies), the rest unsampled"
    )
    tied_token_share: float | None = Field(description="The share of sampled reply tokens spent in tied groups")
    summary: str


def discarded_view(discards: Discards | None) -> DiscardedGroups | None:
    return None if discards is None else answer_from(DiscardedGroups, discards)


def at_cap_view(cut: Limit | None, requests: Requests | None) -> RepliesAtCap | None:
    if cut is None or requests is None:
        return None
    return answer_from(  # the cut's own fields, the counts of the requests
        RepliesAtCap,
        cut,
        replies_at_cap=requests.replies_at_cap,
        replies=requests.replies,
        summary=f"{requests.replies_at_cap} of {requests.replies} replies ran to their cap, cut by {cut.summary}",
    )


def requests_view(requests: Requests, env: dict[str, Any], trainer: dict[str, Any], now: float) -> EnvRequests | None:
    """A run's environment requests, once it has sent any."""
    if not requests.sent:
        return None
    oldest = requests.oldest_in_flight_at
    return answer_from(
        EnvRequests,
        requests,
        oldest_in_flight_s=round(now - oldest, 1) if oldest else None,
        replies_at_cap=at_cap_view(at_cap(requests, env, trainer), requests),
        timeouts_summary=timeouts_line(requests, env, trainer, now),
    )


def items_view(counts: ItemCounts | None) -> TrainingItems | None:
    if counts is None:
        return None
    share = counts.tied_token_share
    return answer_from(
        TrainingItems, counts, tied_token_share=round(share, 4) if share is not None else None, summary=counts.line
    )
