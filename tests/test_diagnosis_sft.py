"""The diagnosis of agent runs with a supervised stage: the no-tool-call finding proposes the stage,
a stage that did not teach the call says so, and a stage that learned its examples but not the task
(its loss fell, held-out accuracy did not rise) is told to see more examples fewer times."""

from __future__ import annotations

from typing import Any

from test_diagnosis import ENV, by_code, facts, rows

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.rules import diagnose

SECTION = {"sources": ["demonstrations"], "items": 64, "epochs": 3, "learning_rate": 2e-4}


def stage_evals(before: tuple[float, float], after: tuple[float, float]) -> list[dict[str, Any]]:
    """(accuracy, tool-call share) before the stage and after its 12 steps, as eval.jsonl has them."""
    return [
        {"step": 0, "stage": "sft", "sft_step": k, "eval_accuracy": acc, "eval_tool_call_share": share}
        for k, (acc, share) in ((0, before), (12, after))
    ]


def losses(first: float, last: float) -> list[dict[str, Any]]:
    return [{"step": k, "total_steps": 12, "loss": first + (last - first) * (k - 1) / 11} for k in range(1, 13)]


def test_no_tool_calls_proposes_the_supervised_stage_where_the_environment_has_one() -> None:
    silent = rows(2, agent_tool_calls_mean=0.0, no_signal_share=1.0, reward_std=0.0, reward_mean=0.0)
    env = {**ENV, "demonstrations_per_group": 0, "sft": None}
    step = by_code(diagnose(facts(silent, env=env)))["no_tool_calls"].next_step
    assert step.tool == "rl_edit_config" and step.arguments["field"] == "sft"
    assert step.arguments["value"]["sources"] == ["demonstrations"] and "rl_preview_sft" in step.why


def test_a_stage_that_left_no_tool_call_says_so_and_trains_longer() -> None:
    env = {**ENV, "sft": SECTION}
    silent = rows(2, agent_tool_calls_mean=0.0, no_signal_share=1.0, reward_std=0.0, reward_mean=0.0)
    found = by_code(diagnose(facts(silent, stage_evals((0.0, 0.0), (0.0, 0.0)), env=env, sft_steps=losses(4, 3))))
    assert "no_tool_calls" not in found  # one finding for one cause: the stage's
    finding = found["sft_no_tool_calls"]
    assert finding.severity == "error" and finding.next_step.arguments["field"] == "sft"
    assert finding.next_step.arguments["value"] == {**SECTION, "epochs": 6, "learning_rate": 4e-4, "max_steps": None}
    taught = stage_evals((0.0, 0.0), (0.25, 0.75))
    assert "sft_no_tool_calls" not in by_code(diagnose(facts(silent, taught, env=env, sft_steps=losses(4, 3))))
    running = stage_evals((0.0, 0.0), (0.0, 0.0))[:1]  # only the evaluation before its first step
    assert "sft_no_tool_calls" not in by_code(diagnose(facts([], running, env=env, sft_steps=losses(4, 3))))


def test_a_stage_whose_loss_fell_while_accuracy_did_not_rise_memorized() -> None:
    env = {**ENV, "sft": SECTION}
    evals = stage_evals((0.125, 0.0), (0.125, 0.875))
    fell = losses(4.0, 4.0 * t.SFT_LOSS_FELL_TO * 0.9)
    finding = by_code(diagnose(facts([], evals, env=env, sft_steps=fell)))["sft_memorized"]
    assert finding.severity == "warning"
    assert finding.next_step.arguments["value"] == {**SECTION, "epochs": 1, "items": 128}
    assert [e.metric for e in finding.evidence] == ["sft_loss", "eval_accuracy"]
    learned = stage_evals((0.125, 0.0), (0.5, 0.875))
    assert "sft_memorized" not in by_code(diagnose(facts([], learned, env=env, sft_steps=fell)))
    barely = losses(4.0, 3.5)
    assert "sft_memorized" not in by_code(diagnose(facts([], evals, env=env, sft_steps=barely)))


def test_a_stage_that_solved_the_held_out_items_leaves_rl_no_signal_and_says_stop_there() -> None:
    env = {**ENV, "sft": SECTION}
    solved = stage_evals((0.0625, 0.0), (1.0, 1.0))
    two_steps = rows(2, groups=2)  # 4 groups reached the trainer...
    finding = by_code(diagnose(facts(two_steps, solved, env=env, groups_scored=209)))["sft_left_no_signal"]
    assert finding.severity == "warning" and finding.next_step.tool == "rl_stop_training"
    assert "205 of the 209 groups" in finding.evidence[1].summary and "rl_export_model" in finding.next_step.why
    # ...of 209 scored: the rest all-equal. Where most groups reach it, or the stage left items unsolved: silent
    assert "sft_left_no_signal" not in by_code(diagnose(facts(two_steps, solved, env=env, groups_scored=6)))
    assert "sft_left_no_signal" not in by_code(diagnose(facts(rows(8, groups=2), solved, env=env, groups_scored=20)))
    halfway = stage_evals((0.0625, 0.0), (0.5, 1.0))
    assert "sft_left_no_signal" not in by_code(diagnose(facts(two_steps, halfway, env=env, groups_scored=209)))
