"""The answers' views of what an environment process reports (env_health.json): its discarded
groups, its replies cut at their cap, its requests, its training items (rl_test_inference,
rl_check_status, rl_get_results)."""

from __future__ import annotations

from typing import Any

from rl_mcp.mcp_api.env_health.answers import DiscardedGroups, EnvRequests, RepliesAtCap, TrainingItems
from rl_mcp.runs.env_health import Discards, Requests
from rl_mcp.runs.item_counts import ItemCounts
from rl_mcp.runs.reply_length import Limit, at_cap, timeouts_line


def discarded_view(discards: Discards | None) -> DiscardedGroups | None:
    if discards is None:
        return None
    return DiscardedGroups(
        groups_discarded=discards.total,
        in_a_row=discards.in_a_row,
        groups_scored=discards.groups,
        scores=discards.scores,
        sample_replies=discards.replies,
        likely_cause=discards.likely,
        usual_causes=discards.causes,
    )


def at_cap_view(cut: Limit | None, requests: Requests | None) -> RepliesAtCap | None:
    if cut is None or requests is None:
        return None
    return RepliesAtCap(
        replies_at_cap=requests.replies_at_cap,
        replies=requests.replies,
        cut_by=cut.cut_by,
        field=cut.field,
        summary=f"{requests.replies_at_cap} of {requests.replies} replies ran to their cap, cut by {cut.summary}",
    )


def requests_view(requests: Requests, env: dict[str, Any], trainer: dict[str, Any], now: float) -> EnvRequests | None:
    """A run's environment requests, once it has sent any."""
    if not requests.sent:
        return None
    oldest = requests.oldest_in_flight_at
    return EnvRequests(
        sent=requests.sent,
        answered=requests.answered,
        timeouts=requests.timeouts,
        client_retries=requests.client_retries,
        client_retry_causes=requests.client_retry_causes,
        client_timeout_s=requests.client_timeout_s,
        client_timeout_basis=requests.client_timeout_basis,
        in_flight=requests.in_flight,
        oldest_in_flight_s=round(now - oldest, 1) if oldest else None,
        reply_tokens=requests.reply_tokens,
        replies_at_cap=at_cap_view(at_cap(requests, env, trainer), requests),
        timeouts_summary=timeouts_line(requests, env, trainer, now),
    )


def items_view(counts: ItemCounts | None) -> TrainingItems | None:
    if counts is None:
        return None
    share = counts.tied_token_share
    return TrainingItems(
        drawn_by=counts.drawn_by,
        items=counts.items,
        active=counts.active,
        retired_solved=counts.retired,
        deferred_unsolved=counts.deferred,
        all_retired=counts.all_retired,
        groups=counts.groups,
        tied_at_top=counts.ties_top,
        tied_at_zero=counts.ties_zero,
        tied_at_zero_refused=counts.zero_refused,
        tied_other=counts.ties_other,
        stopped_at_probe=counts.probes_stopped,
        tied_token_share=round(share, 4) if share is not None else None,
        summary=counts.line,
    )
