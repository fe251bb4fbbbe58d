"""What a run's draw says (items.json, written by its environment process: tinker_atropos.item_draw):
its items active, retired_solved as solved and deferred_unsolved as unsolved, and the groups that tied (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ItemCounts:
    drawn_by: str  # "product": the draw retires and defers; "environment": its own order, counted by prompt
    items: int
    active: int
    retired_solved: int
    deferred_unsolved: int
    all_retired: bool
    groups: int
    tied_at_top: int  # groups whose replies all solved the item (atroposlib drops them)
    tied_at_zero: int  # ... all scored zero
    tied_other: int  # ... all scored the same in between
    reply_tokens: int
    tied_reply_tokens: int
    tied_at_zero_refused: int = 0  # ties at zero where every reply's tool calls or actions failed: no valid action
    stopped_at_probe: int = 0  # tied groups stopped at their probe, the rest never sampled (item_draw.probe)

    @property
    def ties(self) -> int:
        return self.tied_at_top + self.tied_at_zero + self.tied_other

    @property
    def tied_token_share(self) -> float | None:
        """The share of the rollouts' sampled tokens that went into groups atroposlib dropped as tied."""
        return self.tied_reply_tokens / self.reply_tokens if self.reply_tokens else None

    @property
    def line(self) -> str:
        share = self.tied_token_share
        tokens = f" ({share:.0%} of the reply tokens)" if share is not None else ""
        probes = (
            f"; {self.stopped_at_probe} tied groups stopped at their first replies" if self.stopped_at_probe else ""
        )
        return (
            f"{self.ties} of {self.groups} groups tied{tokens}: {self.tied_at_top} at the top reward, "
            f"{self.tied_at_zero} at zero ({self.tied_at_zero_refused} with every action refused), "
            f"{self.tied_other} in between; items: {self.active} active, {self.retired_solved} retired as solved, "
            f"{self.deferred_unsolved} deferred as unsolved, of {self.items}{probes}"
        )


def read_items(path: Path) -> ItemCounts | None:
    """What `path` says, or None (no file yet, or not one the environment process wrote)."""
    try:
        raw = json.loads(path.read_text())
        ties = raw["ties"]
        return ItemCounts(
            drawn_by=str(raw["drawn_by"]),
            items=int(raw["items"]),
            active=int(raw["active"]),
            retired_solved=int(raw["retired"]),
            deferred_unsolved=int(raw["deferred"]),
            all_retired=bool(raw["all_retired"]),
            groups=int(raw["groups"]),
            tied_at_top=int(ties["top"]),
            tied_at_zero=int(ties["zero"]),
            tied_other=int(ties["other"]),
            tied_at_zero_refused=int(raw.get("zero_refused") or 0),
            stopped_at_probe=int(raw.get("probes_stopped") or 0),
            reply_tokens=int(raw["reply_tokens"]),
            tied_reply_tokens=int(raw["tied_reply_tokens"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
