"""A group sampled in two parts: a probe of a few replies first, the rest only when they differ (pure).

A group whose replies all score the same teaches nothing and is dropped. Where a tie is likely (the
item's last group tied, or most of the run's groups tie) the environment first samples `probe_replies`
replies: if they tie, the group stops there and costs a quarter of a whole one (2 of 8); if they
differ, the group has a spread whatever the rest scores, and the rest is sampled and trained with
them. Where a tie is unlikely a probe costs more than it saves (a probe of an item answered right 7
times in 10 ties 58% of the time, and the group it stopped would have taught), so other groups are
sampled whole at once.
"""

from __future__ import annotations

from typing import Any

from tinker_atropos.item_draw.ledger import ItemLedger

# Any item is probed once this share of the run's groups tied, over at least PROBE_MIN_GROUPS groups:
# at one tie in two, a probe of 2 finds teaching groups for fewer replies than whole groups of 8 do
# for items answered right up to 7 times in 10.
PROBE_TIE_SHARE = 0.5
PROBE_MIN_GROUPS = 4  # about the groups in flight before the first is scored


def probe_size(ledger: ItemLedger, key: str, probe_replies: int, group_size: int) -> int:
    """How many replies to sample first for item `key`; 0: the group whole at once."""
    if ledger.window == 0 or not 0 < probe_replies < group_size:
        return 0
    last = ledger.recent.get(key)
    if last:
        return probe_replies if last[-1] != "mixed" else 0
    tied = sum(ledger.ties.values())
    return probe_replies if ledger.groups >= PROBE_MIN_GROUPS and tied >= PROBE_TIE_SHARE * ledger.groups else 0


def merge_groups(probe: dict[str, Any], rest: dict[str, Any]) -> dict[str, Any]:
    """One ScoredDataGroup of a probe and the rest of its group: each per-reply list joined, in order.
    A per-reply list that only one part has (sampler logprobs from one server answer, not the other)
    is left out, so every list keeps one entry per reply; the group's own keys come from the probe."""
    n_probe, n_rest = len(probe["tokens"]), len(rest["tokens"])
    merged: dict[str, Any] = {}
    for key in probe.keys() | rest.keys():
        first, second = probe.get(key), rest.get(key)
        if isinstance(first, list) and len(first) == n_probe:
            if isinstance(second, list) and len(second) == n_rest:
                merged[key] = [*first, *second]
        elif first is not None:
            merged[key] = first
    return merged
