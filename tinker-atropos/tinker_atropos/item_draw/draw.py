"""The draw of the environments the product owns: a seeded order over the training items, passed
over and over, that skips retired items, draws deferred ones on one turn in DEFER_EVERY, and at the
end of each pass rechecks retired items in rotation (RECHECK_SHARE of the draws, least recently
checked first), so that an item the policy has since forgotten comes back. Its whole state is plain
data, saved with the environment's data position, so a resumed run draws what the first would have.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any

from tinker_atropos.item_draw.ledger import ItemLedger

DEFER_EVERY = 4  # a deferred item is drawn on one of this many of its turns
RECHECK_SHARE = 0.25  # retired items rechecked at the passes' ends: this share of the draws of the passes, in all


@dataclass
class ItemDraw:
    n_items: int
    seed: int
    ledger: ItemLedger
    draws: int = 0  # items given out so far (the data position a resumed run logs)
    passes: int = 0
    cursor: int = 0
    pass_draws: int = 0  # draws in the current pass
    recheck_credit: float = 0.0  # rechecks earned by the draws so far and not yet made
    skipped: dict[str, int] = field(default_factory=dict)  # deferred item -> its turns passed over
    checked: dict[str, int] = field(default_factory=dict)  # retired item -> the pass it was last rechecked at
    rechecks: list[int] = field(default_factory=list)  # queued for the pass that just ended
    _order: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if self.n_items < 1:
            raise ValueError("no training items to draw from")
        self._order = list(range(self.n_items))
        random.Random(self.seed).shuffle(self._order)

    @property
    def all_retired(self) -> bool:
        return all(self.ledger.retired(str(i)) for i in range(self.n_items))

    def next(self) -> int | None:
        """The index of the next item to roll out; None once every item is retired as solved."""
        index = self._next()
        self.draws += index is not None
        return index

    def _next(self) -> int | None:
        if self.rechecks:
            return self.rechecks.pop(0)
        if self.all_retired:
            return None
        for _ in range((DEFER_EVERY + 1) * self.n_items + 1):  # every turn of every item, bounded
            if self.cursor == self.n_items:
                self._end_pass()
                if self.rechecks:
                    return self.rechecks.pop(0)
            index = self._order[self.cursor]
            self.cursor += 1
            key = str(index)
            if self.ledger.retired(key):
                continue
            if self.ledger.deferred(key):
                self.skipped[key] = self.skipped.get(key, 0) + 1
                if self.skipped[key] < DEFER_EVERY:
                    continue
                self.skipped[key] = 0
            self.pass_draws += 1
            return index
        return None

    def _end_pass(self) -> None:
        retired = [i for i in self._order if self.ledger.retired(str(i))]
        retired.sort(key=lambda i: self.checked.get(str(i), -1))  # stable: the order breaks ties
        self.recheck_credit = self.recheck_credit + self.pass_draws * RECHECK_SHARE if retired else 0.0
        n = min(len(retired), math.floor(self.recheck_credit))
        self.recheck_credit -= n
        self.rechecks = retired[:n]
        for i in self.rechecks:
            self.checked[str(i)] = self.passes
        self.passes += 1
        self.cursor = 0
        self.pass_draws = 0

    def state(self) -> dict[str, Any]:
        """Plain data for the environment's checkpoint (atroposlib writes it as JSON)."""
        return {
            "n_items": self.n_items,
            "seed": self.seed,
            "ledger": self.ledger.state(),
            "draws": self.draws,
            "passes": self.passes,
            "cursor": self.cursor,
            "pass_draws": self.pass_draws,
            "recheck_credit": self.recheck_credit,
            "skipped": self.skipped,
            "checked": self.checked,
            "rechecks": self.rechecks,
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> ItemDraw:
        return cls(**{**state, "ledger": ItemLedger.from_state(state["ledger"])})
