"""Rules about a run's supervised stage (sft): read from its evaluations (eval.jsonl lines tagged
`stage: sft`, `sft_step` 0 before it) and its steps (sft/steps.jsonl)."""

from __future__ import annotations

from typing import Any

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts
from rl_mcp.diagnosis.findings import Evidence, Finding, NextStep
from rl_mcp.diagnosis.next_steps import edit


def stage_evals(facts: RunFacts) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The stage's first and last evaluation, once it evaluated after at least one step."""
    rows = [e for e in facts.evals if e.get("stage") == "sft"]
    if len(rows) < 2 or not rows[-1].get("sft_step"):
        return None
    return rows[0], rows[-1]


def _section(facts: RunFacts) -> dict[str, Any]:
    section = facts.env.get("sft")
    return dict(section) if isinstance(section, dict) else {}


def _points(rows: list[dict[str, Any]], key: str) -> tuple[list[int], list[float | None]]:
    return [int(r.get("sft_step") or r.get("step") or 0) for r in rows], [r.get(key) for r in rows]


def sft_taught_no_tool_calls(facts: RunFacts) -> Finding | None:
    """After the stage the held-out rollouts still make (almost) no tool call."""
    ends = stage_evals(facts)
    share = ends[1].get("eval_tool_call_share") if ends else None
    if ends is None or not isinstance(share, (int, float)) or share > t.SFT_NO_CALLS_SHARE:
        return None
    section = _section(facts)
    epochs, lr = int(section.get("epochs") or 3), float(section.get("learning_rate") or 2.0e-4)
    steps, shares = _points(list(ends), "eval_tool_call_share")
    return Finding(
        "sft_no_tool_calls",
        "error",
        "The supervised stage did not teach the tool call",
        edit(
            "sft",
            {**section, "epochs": epochs * 2, "learning_rate": float(f"{lr * 2:.3g}"), "max_steps": None},
            "the held-out rollouts still make no well-formed tool call after the stage: train it longer and "
            "harder (rl_preview_sft shows the examples; more `items` or a `file` of your own trajectories "
            "give it more to learn from), then start a new run",
        ),
        [Evidence("eval_tool_call_share", steps, shares, f"{shares[0]} before the stage -> {share} after it")],
    )


def sft_memorized(facts: RunFacts) -> Finding | None:
    """The stage's loss fell by half or more while the held-out accuracy did not rise."""
    ends = stage_evals(facts)
    losses = [float(v) for s in facts.sft_steps if isinstance(v := s.get("loss"), (int, float))]
    if ends is None or len(losses) < 2 or losses[-1] > losses[0] * t.SFT_LOSS_FELL_TO:
        return None
    before, after = ends[0].get("eval_accuracy"), ends[1].get("eval_accuracy")
    if not isinstance(before, (int, float)) or not isinstance(after, (int, float)) or after > before:
        return None
    section = _section(facts)
    epochs, items = int(section.get("epochs") or 3), int(section.get("items") or 64)
    steps, accuracy = _points(list(ends), "eval_accuracy")
    return Finding(
        "sft_memorized",
        "warning",
        "The supervised stage learned its examples, not the task",
        edit(
            "sft",
            {**section, "epochs": max(1, epochs // 2), "items": items * 2},
            "its loss fell while the held-out accuracy did not rise: fewer passes over more examples",
        ),
        [
            Evidence(
                "sft_loss", [1, len(losses)], [losses[0], losses[-1]], f"loss {losses[0]:.3g} -> {losses[-1]:.3g}"
            ),
            Evidence("eval_accuracy", steps, accuracy, f"held-out accuracy {before} before -> {after} after"),
        ],
    )


def sft_left_no_signal(facts: RunFacts) -> Finding | None:
    """The stage already answers the held-out items, so RL's groups score alike: atroposlib drops
    nearly every one, and each step waits for a rare group whose replies differ."""
    ends = stage_evals(facts)
    after = ends[1].get("eval_accuracy") if ends else None
    scored = facts.groups_scored or 0
    trained = sum(int(m.get("groups") or 0) for m in facts.metrics)
    if ends is None or not isinstance(after, (int, float)) or after < t.SFT_SOLVED_ACCURACY:
        return None
    if scored < t.SFT_SOLVED_MIN_GROUPS or (scored - trained) / scored < t.SFT_SOLVED_DROPPED_SHARE:
        return None
    steps, accuracy = _points(list(ends), "eval_accuracy")
    return Finding(
        "sft_left_no_signal",
        "warning",
        "The supervised stage already answers the held-out items: RL's groups all score the same",
        NextStep(
            "rl_stop_training",
            {"run_id": facts.run_id},
            "the stage's adapter is the result: stop and export it (rl_export_model). For RL to add more, "
            "give it items the stage does not yet solve, or replies that differ (a higher temperature, a "
            "larger group_size) in a new run",
        ),
        [
            Evidence("eval_accuracy", steps, accuracy, f"held-out accuracy {accuracy[0]} before -> {after} after"),
            Evidence(
                "groups",
                [len(facts.metrics)],
                [trained],
                f"{scored - trained} of the {scored} groups its environment scored were dropped as all-equal; "
                f"{trained} reached the trainer in {len(facts.metrics)} steps",
            ),
        ],
    )
