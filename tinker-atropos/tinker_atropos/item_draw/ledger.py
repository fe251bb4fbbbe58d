"""Each training item's last groups, and what all the groups of a run spent (pure).

An item is *retired* when every reply of each of its last `window` groups solved it, and *deferred*
when no reply of any of them did. The ledger also counts the groups that tied (atroposlib drops
them) at the top and at zero, and the reply tokens they took: the diagnosis and bench/item_signal.py
read those from `items.json`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinker_atropos.item_draw.outcomes import GroupOutcome, Outcome, group_outcome
from tinker_atropos.run_files import atomic_write_text


@dataclass
class ItemLedger:
    window: int  # k: the groups of an item that decide whether it is retired or deferred (0: never)
    recent: dict[str, list[Outcome]] = field(default_factory=dict)  # item key -> its last k outcomes
    groups: int = 0
    ties: dict[str, int] = field(default_factory=lambda: {"top": 0, "zero": 0, "other": 0})
    zero_refused: int = 0  # ties at zero where every reply's actions were refused (no valid action)
    reply_tokens: int = 0
    tied_reply_tokens: int = 0
    probes: int = 0  # groups sampled in two parts (item_draw.probe): a probe first
    probes_stopped: int = 0  # ... whose probe tied, so the rest was never sampled

    def record(self, key: str, group: GroupOutcome, *, probe: bool = False) -> None:
        """One group's outcome; `probe`: it began with a probe (a tied one is the whole group)."""
        self.groups += 1
        self.probes += probe
        self.probes_stopped += probe and group.tie is not None
        self.reply_tokens += group.reply_tokens
        if group.tie is not None:
            self.ties[group.tie] += 1
            self.tied_reply_tokens += group.reply_tokens
            self.zero_refused += group.tie == "zero" and group.all_refused
        if self.window > 0:
            self.recent[key] = [*self.recent.get(key, []), group.outcome][-self.window :]

    def record_groups(self, key: str, scored_data: Any, *, probe: bool = False) -> None:
        """What `handle_send_to_api` is given (one ScoredDataGroup or a list of them), each group recorded."""
        for group in scored_data if isinstance(scored_data, list) else [scored_data]:
            if isinstance(group, dict) and (outcome := group_outcome(group)) is not None:
                self.record(key, outcome, probe=probe)

    def retired(self, key: str) -> bool:
        return self._all(key, "solved")

    def deferred(self, key: str) -> bool:
        return self._all(key, "unsolved")

    def _all(self, key: str, outcome: Outcome) -> bool:
        last = self.recent.get(key, [])
        return self.window > 0 and len(last) >= self.window and all(o == outcome for o in last)

    def counts(self, total: int | None) -> dict[str, int]:
        """Items active, retired as solved, deferred as unsolved; `total` None: the items seen so far."""
        retired = sum(self.retired(k) for k in self.recent)
        deferred = sum(self.deferred(k) for k in self.recent)
        items = len(self.recent) if total is None else total
        return {"items": items, "active": items - retired - deferred, "retired": retired, "deferred": deferred}

    def state(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ItemLedger:
        return cls(**state)


def write_items_file(
    path: Path, ledger: ItemLedger, *, total: int | None, drawn_by: str, all_retired: bool = False
) -> None:
    """items.json (docs/run-files.md): the counts, the ties and their tokens, whether the draw is done."""
    record = {
        "drawn_by": drawn_by,  # "product": our draw retires and defers; "environment": counted only
        "window": ledger.window,
        **ledger.counts(total),
        "all_retired": all_retired,
        "groups": ledger.groups,
        "ties": ledger.ties,
        "zero_refused": ledger.zero_refused,
        "reply_tokens": ledger.reply_tokens,
        "tied_reply_tokens": ledger.tied_reply_tokens,
        "probes": ledger.probes,
        "probes_stopped": ledger.probes_stopped,
    }
    atomic_write_text(path, json.dumps(record))
