"""The draw of training items (tinker_atropos.item_draw): solved items retired and rechecked, unsolved
ones deferred but never dropped, seeded and reproducible, and resumed from its saved state as JSON."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from tinker_atropos.item_draw.draw import DEFER_EVERY, ItemDraw
from tinker_atropos.item_draw.ledger import ItemLedger
from tinker_atropos.item_draw.outcomes import GroupOutcome, group_outcome

SOLVED, UNSOLVED, MIXED = (GroupOutcome(o, None, 10) for o in ("solved", "unsolved", "mixed"))


def play(draw: ItemDraw, n: int, outcome_of) -> list[int]:
    """`n` draws, each item's group scored at once as `outcome_of(index)` says."""
    drawn = []
    for _ in range(n):
        index = draw.next()
        if index is None:
            break
        drawn.append(index)
        draw.ledger.record(str(index), outcome_of(index))
    return drawn


def test_the_outcome_of_a_group_and_its_tie() -> None:
    flags = [{"correct": True}] * 3
    assert group_outcome({"scores": [1.0] * 3, "overrides": flags, "masks": [[-100, 5, 6]] * 3}) == GroupOutcome(
        "solved", "top", 6
    )
    assert group_outcome({"scores": [0.0, 0.0]}) == GroupOutcome("unsolved", "zero", 0)
    assert group_outcome({"scores": [0.3, 0.3], "overrides": [{"correct": False}] * 2}).tie == "other"
    one_right = [{"correct": True}, {"correct": False}]
    assert group_outcome({"scores": [1.0, 0.0], "overrides": one_right}).outcome == "mixed"
    # no correctness flags: full credit (1.0) solves, nothing above 0 leaves it unsolved
    assert group_outcome({"scores": [1.0, 1.0]}).outcome == "solved"
    assert group_outcome({"scores": [-1.0, 0.0]}) == GroupOutcome("unsolved", None, 0)
    assert group_outcome({"scores": []}) is None
    refused = [{"correct": False, "tool_errors": 2}, {"correct": False, "tool_errors": 1}]
    assert group_outcome({"scores": [0.0, 0.0], "overrides": refused}).all_refused
    assert not group_outcome({"scores": [0.0, 0.0], "overrides": [refused[0], {"correct": False}]}).all_refused


def test_solved_items_are_retired_and_the_draw_ends_when_all_are() -> None:
    draw = ItemDraw(5, seed=3, ledger=ItemLedger(window=2))
    solved = {0, 1, 2}
    drawn = play(draw, 200, lambda i: SOLVED if i in solved else MIXED)
    counts = Counter(drawn)
    # a solved item is drawn twice (its window) and then only by the rechecks at the passes' ends
    assert all(counts[i] < counts[3] / 2 for i in solved), counts
    assert draw.ledger.counts(5) == {"items": 5, "active": 2, "retired": 3, "deferred": 0}
    rechecked = [i for i in drawn[20:] if i in solved]
    assert rechecked and len(rechecked) <= 0.25 * len(drawn[20:]) + 2  # rechecks: a quarter of the draws
    solved |= {3, 4}
    rest = play(draw, 200, lambda i: SOLVED)
    assert draw.next() is None and draw.all_retired and len(rest) < 20


def test_a_recheck_that_fails_brings_an_item_back() -> None:
    draw = ItemDraw(4, seed=0, ledger=ItemLedger(window=2))
    play(draw, 8, lambda i: SOLVED if i == 0 else MIXED)  # two passes: item 0 solved twice, retired
    assert draw.ledger.retired("0")
    play(draw, 40, lambda i: MIXED)  # forgotten: its recheck is mixed
    assert not draw.ledger.retired("0") and Counter(play(draw, 30, lambda i: MIXED))[0] >= 5


def test_unsolved_items_are_deferred_but_never_dropped() -> None:
    draw = ItemDraw(4, seed=1, ledger=ItemLedger(window=2))
    counts = Counter(play(draw, 400, lambda i: UNSOLVED if i == 2 else MIXED))
    assert draw.ledger.deferred("2") and draw.ledger.counts(4)["deferred"] == 1
    assert 0 < counts[2] < counts[0] / (DEFER_EVERY - 1), counts


def test_window_0_draws_every_item_in_turn() -> None:
    draw = ItemDraw(3, seed=7, ledger=ItemLedger(window=0))
    drawn = play(draw, 30, lambda i: SOLVED)
    assert Counter(drawn) == {0: 10, 1: 10, 2: 10} and draw.ledger.counts(3)["retired"] == 0


@pytest.mark.parametrize("seed", [0, 11])
def test_the_draw_is_seeded_and_resumes_from_its_saved_state(seed: int) -> None:
    def outcome(i: int) -> GroupOutcome:
        return SOLVED if i % 3 == 0 else UNSOLVED if i % 3 == 1 else MIXED

    whole = play(ItemDraw(12, seed, ItemLedger(2)), 150, outcome)
    assert whole == play(ItemDraw(12, seed, ItemLedger(2)), 150, outcome)  # reproducible
    assert whole != play(ItemDraw(12, seed + 1, ItemLedger(2)), 150, outcome)  # seeded
    first = ItemDraw(12, seed, ItemLedger(2))
    head = play(first, 70, outcome)
    saved = json.loads(json.dumps(first.state()))  # as the environment's checkpoint holds it
    resumed = ItemDraw.from_state(saved)
    assert head + play(resumed, 80, outcome) == whole and resumed.draws == len(whole)


def test_a_probe_where_a_tie_is_likely_and_the_group_joined_after_it() -> None:
    from tinker_atropos.item_draw.probe import PROBE_MIN_GROUPS, merge_groups, probe_size

    ledger = ItemLedger(window=2)
    assert probe_size(ledger, "0", 2, 8) == 0  # an item never drawn, in a run without ties yet: whole
    ledger.record("0", SOLVED)
    ledger.record("1", UNSOLVED)
    ledger.record("2", MIXED)
    assert (probe_size(ledger, "0", 2, 8), probe_size(ledger, "1", 2, 8), probe_size(ledger, "2", 2, 8)) == (2, 2, 0)
    assert probe_size(ledger, "0", 0, 8) == probe_size(ledger, "0", 8, 8) == probe_size(ItemLedger(0), "0", 2, 8) == 0
    tied, run = GroupOutcome("solved", "top", 10), ItemLedger(window=2)
    for i in range(PROBE_MIN_GROUPS - 1):
        run.record(str(i), tied)
    assert probe_size(run, "new", 2, 8) == 0  # too few groups yet to say that most tie
    run.record("x", MIXED)
    assert probe_size(run, "new", 2, 8) == 2  # most of the run's groups tied: a new item is probed too
    for _ in range(PROBE_MIN_GROUPS):
        run.record("x", MIXED)
    assert probe_size(run, "new", 2, 8) == 0  # fewer than half now
    probe = {"tokens": [[1], [2]], "scores": [1.0, 0.0], "inference_logprobs": [[-0.1], [-0.2]], "group_overrides": {}}
    rest = {"tokens": [[3], [4]], "scores": [1.0, 1.0], "inference_logprobs": None}
    assert merge_groups(probe, rest) == {
        "tokens": [[1], [2], [3], [4]],
        "scores": [1.0, 0.0, 1.0, 1.0],
        "group_overrides": {},
    }
