"""The answers' views of what an environment process reports (env_health.json): its discarded
groups, its replies cut at their cap, its requests, its training items (rl_test_inference,
rl_check_status, rl_get_results)."""

from __future__ import annotations

from typing import Any

from rl_mcp.mcp_api.env_health.answers import DiscardedGroups, EnvRequests, RepliesAtCap, TrainingItems
from rl_mcp.mcp_api.from_domain import answer_from
from rl_mcp.runs.env_health import Discards, Requests
from rl_mcp.runs.item_counts import ItemCounts
from rl_mcp.runs.reply_length import Limit, at_cap, timeouts_line


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
