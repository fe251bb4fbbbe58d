"""What the groups that tied say (items.json, tinker_atropos.item_draw): ties at the top reward are
training items already solved; ties at zero are items no reply solves (`no_reward_signal`,
`no_tool_calls` say why). Seen after a supervised stage on a tool server: held-out accuracy 0.8, so
`sft_left_no_signal` could not fire, while every training group tied at 1.0 and RL made no step in
5 minutes."""

from __future__ import annotations

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts
from rl_mcp.diagnosis.findings import Evidence, Finding, NextStep
from rl_mcp.diagnosis.next_steps import edit
from rl_mcp.diagnosis.sft_rules import sft_left_no_signal


def ties_evidence(facts: RunFacts) -> list[Evidence]:
    """The split of the groups that tied, at the top and at zero (none before the first group)."""
    c = facts.items
    if c is None or not c.groups:
        return []
    steps = [len(facts.metrics)] * 3
    return [Evidence("tied_groups", steps, [float(c.tied_at_top), float(c.tied_at_zero), float(c.tied_other)], c.line)]


def ties_at_top(facts: RunFacts) -> bool:
    c = facts.items
    return (
        c is not None
        and c.tied_at_top >= t.ONE_END_MIN_TIES
        and c.tied_at_top >= t.ONE_END_TIE_SHARE * c.ties
        and c.ties >= t.SOLVED_TIED_GROUPS_SHARE * c.groups
    )


def items_solved(facts: RunFacts) -> Finding | None:
    """Most groups tie, at the top reward: the policy already solves its training items."""
    if not ties_at_top(facts) or sft_left_no_signal(facts) is not None:
        return None
    assert facts.items is not None
    level = facts.env.get("level")
    if isinstance(level, int) and not isinstance(level, bool):
        step = edit("level", level + 1, "harder items, which the policy does not solve yet; then start a new run")
    else:
        step = NextStep(
            "rl_stop_training",
            {"run_id": facts.run_id},
            "the adapter already solves these items: stop and export it (rl_export_model). For RL to add more, give "
            "it items it does not solve yet (a tasks file of harder ones) in a new run",
        )
    retiring = " (the draw retires them; the run ends once all are)" if facts.items.drawn_by == "product" else ""
    return Finding(
        "items_solved",
        "warning",
        f"The training items are solved: their groups tie at the top reward and are dropped{retiring}",
        step,
        ties_evidence(facts),
    )
