"""Whether a run's replies collapsed, read from the replies themselves rather than their scores.

A reward with partial credit keeps the scores of near-identical replies slightly apart, so a
collapsed policy need not leave a single all-equal group: what shows it is fewer distinct replies
per group and a falling entropy of the sampled tokens.
"""

from __future__ import annotations

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts, ends, evidence_of, mean_of, span_of
from rl_mcp.diagnosis.findings import Evidence
from rl_mcp.runs.metrics import series


def collapse_evidence(facts: RunFacts) -> list[Evidence]:
    """The falls that show a collapse: distinct replies per group, the sampled tokens' entropy
    (docs/run-files.md); [] when neither fell so far."""
    found = []
    distinct = series(facts.metrics, "distinct_reply_share")
    if len(distinct) >= t.MIN_TREND_STEPS:
        first, recent = ends(distinct)
        before, now = mean_of(first), mean_of(recent)
        if now <= t.COLLAPSED_DISTINCT_SHARE and before - now >= t.DISTINCT_FALL:
            summary = f"distinct replies per group {before:.0%} ({span_of(first)}) -> {now:.0%} ({span_of(recent)})"
            found.append(evidence_of("distinct_reply_share", first + recent, summary))
    entropy = series(facts.metrics, "token_entropy")
    if len(entropy) >= t.MIN_TREND_STEPS:
        first, recent = ends(entropy)
        before, now = mean_of(first), mean_of(recent)
        if now <= t.COLLAPSED_ENTROPY_SHARE * before:
            summary = f"entropy per sampled token {before:.3g} ({span_of(first)}) -> {now:.3g} nats ({span_of(recent)})"
            found.append(evidence_of("token_entropy", first + recent, summary))
    return found


def converged(facts: RunFacts) -> bool:
    """The latest steps earn nearly the full reward: few distinct replies there are the right ones."""
    rewards = series(facts.metrics, "reward_mean")
    return bool(rewards) and mean_of(ends(rewards)[1]) >= t.CONVERGED_REWARD
