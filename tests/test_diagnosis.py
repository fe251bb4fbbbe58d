"""The run diagnosis: each rule on the recorded metrics of real local runs (tests/fixtures/runs,
re-recorded by its record.py), the thresholds on small synthetic rows, and a finding sent once
as an MCP logging notification to a real subscribed client during a real run."""

from __future__ import annotations

import dataclasses
import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.subscriptions import InMemorySubscriptionBus

from rl_mcp.app import open_app
from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts
from rl_mcp.diagnosis.findings import Evidence, Finding, NextStep
from rl_mcp.diagnosis.inputs import drops_equal_groups, latest_replies
from rl_mcp.diagnosis.notified import sent_codes
from rl_mcp.diagnosis.rules import diagnose
from rl_mcp.mcp_api.notices import LOGGER, FindingNotices
from rl_mcp.mcp_api.server import build_server
from rl_mcp.mcp_api.subscriptions import ResourcePublisher
from rl_mcp.runs.config_file import read_run_config
from rl_mcp.runs.env_health import Discards
from rl_mcp.runs.item_counts import ItemCounts
from rl_mcp.runs.metrics import MetricsCache
from rl_mcp.runs.store import RunRecord
from rl_mcp.settings import Settings
from tinker_atropos.run_files import RunFiles, read_jsonl

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "runs"
CONSTANT_ENV_DIR = Path(__file__).resolve().parent / "byo_envs" / "constant_reward"


def recorded(name: str, *, upto: int | None = None, active: bool = False) -> RunFacts:
    """A fixture run as the rules see it; `upto`: only its first steps (and the evals until then)."""
    folder = FIXTURES / name
    metrics, evals = read_jsonl(folder / "metrics.jsonl"), read_jsonl(folder / "eval.jsonl")
    if upto is not None:
        metrics = metrics[:upto]
        evals = [e for e in evals if e["step"] <= upto and not e.get("final")]
    config = read_run_config(folder / "config.yaml")  # recorded before the trainer section's rename: read as today
    replies_step, replies = latest_replies(folder / "latest_replies.json") if upto is None else (None, [])
    return RunFacts(
        f"run-{name}",
        metrics,
        evals,
        config["env"],
        config["trainer"],
        active=active,
        now=metrics[-1]["time"],
        replies_step=replies_step,
        replies=replies,
    )


def by_code(found: list[Finding]) -> dict[str, Finding]:
    return {f.code: f for f in found}


def numbers(evidence: Evidence) -> list[float]:
    return [v for v in evidence.values if v is not None]


# --- the recorded runs ---------------------------------------------------------------------


# Every recorded run's findings at its end, code: severity. A new fixture states its own here.
EXPECTED: dict[str, dict[str, str]] = {
    "learning_smollm2": {},
    "learning": {"groups_narrowing": "warning", "off_policy_drift": "info"},
    "collapsed_replies": {"groups_narrowing": "warning", "loss_unstable": "info", "off_policy_drift": "info"},
    "collapsing": {"groups_narrowing": "warning", "off_policy_drift": "warning"},
    "collapsing_stalled": {"off_policy_drift": "warning"},
    "broken_reward": {"no_reward_signal": "error"},
    "overfitting": {"reward_up_eval_flat": "warning", "loss_unstable": "info", "off_policy_drift": "info"},
    "unstable": {"loss_unstable": "warning", "eval_regressed": "warning", "off_policy_drift": "warning"},
}


def test_every_recorded_run_gets_its_expected_findings() -> None:
    # (a folder of the recording script's bytecode, where Python writes it, is not a run)
    assert {p.name for p in FIXTURES.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(EXPECTED)
    found = {name: {f.code: f.severity for f in diagnose(recorded(name))} for name in EXPECTED}
    assert found == EXPECTED


def test_learning_run_collapses_to_one_letter() -> None:
    """letter_repeat at learning rate 1e-2: the reward rises from 0.02, but to one letter written
    whatever the prompt (the held-out reward 0.5 is one letter of three right, accuracy stays 0)."""
    facts = recorded("learning")
    rewards = [m["reward_mean"] for m in facts.metrics]
    assert sum(rewards[-6:]) / 6 > sum(rewards[:6]) / 6 + 0.3
    assert {e["eval_reward_mean"] for e in facts.evals if e["step"] >= 8} == {0.5}
    assert {e["eval_accuracy"] for e in facts.evals} == {0.0}
    found = by_code(diagnose(facts))
    narrowing = found["groups_narrowing"]
    assert [e.metric for e in narrowing.evidence] == ["distinct_reply_share"]  # recorded before token_entropy
    assert narrowing.next_step.arguments == {"field": "temperature", "value": 1.3}
    assert found["off_policy_drift"].evidence[0].steps == list(range(2, 9))


def test_healthy_real_model_run_raises_nothing_at_any_step() -> None:
    """SmolLM2 on arithmetic with the demo's settings: reward and held-out eval rise, and no rule
    fires, neither while it runs (replayed step by step) nor once it has ended."""
    facts = recorded("learning_smollm2")
    evals = [e["eval_accuracy"] for e in facts.evals]
    assert evals[-1] > evals[0] + 0.2  # the fixture really learned, on held-out items
    entropy = [m["token_entropy"] for m in facts.metrics]
    assert sum(entropy[-3:]) < 0.4 * sum(entropy[:3])  # surer of its answers, yet not collapsed
    steps = len(facts.metrics)
    fired = {k: diagnose(recorded("learning_smollm2", upto=k, active=True)) for k in range(1, steps + 1)}
    assert all(found == [] for found in fired.values()), fired
    assert diagnose(facts) == []


def replayed(name: str) -> dict[int, dict[str, str]]:
    """The findings (code: severity) after each step, as rl_check_status gives them while the run runs."""
    steps = len(recorded(name).metrics)
    return {k: {f.code: f.severity for f in diagnose(recorded(name, upto=k, active=True))} for k in range(1, steps + 1)}


def test_learning_run_replayed_step_by_step() -> None:
    """While it runs, its off-policy phase is a warning: the tiny model at learning rate 1e-2 moves
    its logprobs by about 1.4 nats a token per step while rollouts are one step stale; once it has
    settled, it stays as info beside the collapse of the replies."""
    fired = replayed("learning")
    assert set().union(*fired.values()) == {"off_policy_drift", "groups_narrowing"}, fired
    assert fired[1] == {}  # on-policy at step 1
    assert all(fired[k] == {"off_policy_drift": "warning"} for k in range(2, 12)), fired
    assert fired[len(fired)] == EXPECTED["learning"]


def test_broken_reward_run_has_no_signal_from_the_start() -> None:
    found = by_code(diagnose(recorded("broken_reward")))
    finding = found["no_reward_signal"]
    assert finding.severity == "error"
    shares = finding.evidence[0]
    assert shares.metric == "no_signal_share" and shares.steps == [1, 2, 3] and shares.values == [1.0, 1.0, 1.0]
    assert any(e.metric == "reward_std" and max(v or 0 for v in e.values) == 0.0 for e in finding.evidence)
    assert finding.next_step.tool == "rl_test_inference" and finding.next_step.arguments == {
        "num_steps": 3,
        "group_size": 8,
    }
    assert "groups_narrowing" not in found  # the same cause is reported once


def test_broken_reward_fires_from_its_first_step_while_running() -> None:
    found = by_code(diagnose(recorded("broken_reward", upto=1, active=True)))
    assert found["no_reward_signal"].evidence[0].steps == [1]


def test_collapsing_run_narrows_and_drifts() -> None:
    found = by_code(diagnose(recorded("collapsing")))
    narrowing = found["groups_narrowing"]
    shares, distinct = narrowing.evidence
    assert shares.metric == "no_signal_share" and set(shares.values) == {1.0} and shares.steps[-1] == 40
    assert distinct.metric == "distinct_reply_share" and distinct.values[0] == 1.0 and distinct.values[-1] == 0.125
    # temperature 0.5 in this run: the next step raises it, an edit letter_repeat accepts
    assert narrowing.next_step.tool == "rl_edit_config"
    assert narrowing.next_step.arguments == {"field": "temperature", "value": 0.8}
    drift = found["off_policy_drift"]
    assert drift.evidence[0].steps == [4, 5, 6] and min(v or 0 for v in drift.evidence[0].values) > t.DRIFT_WARN
    assert drift.next_step.arguments == {"field": "loss_fn", "value": "ppo"}
    assert "no_reward_signal" not in found  # its first steps had signal: this is a collapse, not a broken reward


def test_collapsing_run_caught_while_its_first_steps_drift() -> None:
    found = by_code(diagnose(recorded("collapsing", upto=6, active=True)))
    assert set(found) == {"off_policy_drift"}


def test_collapse_the_scores_hide_is_named_by_the_replies() -> None:
    """letter_repeat as a new user first runs it (its settings, 24 steps at learning rate 1e-3): the
    replies collapse to one letter whatever the prompt, and the partial credit keeps every group's
    scores slightly apart, so no group is all-equal; before it, a drift and a gradient spike passed.
    Each finding's next step is an edit for the next run."""
    facts = recorded("collapsed_replies")
    assert {m["no_signal_share"] for m in facts.metrics} == {0.0}
    found = by_code(diagnose(facts))
    narrowing = found["groups_narrowing"]
    assert "scores still differ" in narrowing.title
    distinct, entropy = narrowing.evidence
    assert distinct.metric == "distinct_reply_share" and distinct.steps == [*range(1, 7), *range(19, 25)]
    assert numbers(distinct)[:6] == [1.0] * 6 and max(numbers(distinct)[6:]) <= 0.32
    assert entropy.metric == "token_entropy" and min(numbers(entropy)[:6]) > 4.5 and max(numbers(entropy)[6:]) < 0.2
    assert narrowing.next_step.arguments == {"field": "temperature", "value": 1.3}
    assert "items" not in narrowing.next_step.why  # groups still have a signal: harder or easier items are beside it
    spike = found["loss_unstable"]
    assert spike.severity == "info" and spike.title.startswith("Gradient norm spiked: 129 at step 6")
    assert spike.next_step.arguments == {"field": "learning_rate", "value": 1e-4}
    drift = found["off_policy_drift"]
    assert drift.severity == "info" and drift.evidence[0].steps == list(range(2, 12))
    assert max(numbers(drift.evidence[0])) > 4.0 and drift.evidence[1].steps == list(range(19, 25))
    assert drift.next_step.arguments == {"field": "loss_fn", "value": "ppo"}


def test_collapse_the_scores_hide_is_caught_while_it_runs() -> None:
    """The drift is a warning while it lasts, the spike is named at its step, the collapse once the
    latest steps' replies are a few (distinct share 0.38 at step 12, 0.25 at step 13)."""
    fired = replayed("collapsed_replies")
    assert fired[1] == {} and fired[2] == {"off_policy_drift": "warning"}
    assert fired[6] == {"off_policy_drift": "warning", "loss_unstable": "info"}
    assert "groups_narrowing" not in fired[13] and fired[14]["groups_narrowing"] == "warning"
    assert all(fired[k] == EXPECTED["collapsed_replies"] for k in range(15, 25)), fired


def test_collapsed_run_whose_groups_are_all_dropped_stalls() -> None:
    """The same collapse as letter_repeat ships: atroposlib drops every all-equal group, no step comes."""
    folder = FIXTURES / "collapsing_stalled"
    tail = (folder / "env_tail.log").read_text().splitlines()
    last_line = datetime.strptime(tail[-1][:23], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC).timestamp()
    facts = dataclasses.replace(
        recorded("collapsing_stalled", active=True), now=last_line, env_drops_equal_groups=drops_equal_groups(tail)
    )
    found = by_code(diagnose(facts))
    stalled = found["stalled"]
    assert "drops every group as all-equal" in stalled.title
    assert stalled.next_step.arguments == {"field": "temperature", "value": 0.8}
    assert stalled.evidence[0].steps == [facts.metrics[-1]["step"]]
    assert "off_policy_drift" in found
    assert "stalled" not in by_code(diagnose(dataclasses.replace(facts, active=False)))  # stopped: not late


def test_overfitting_run_reward_up_eval_flat() -> None:
    """Trained on two items of ten letters: it learns those two, the held-out eval of all ten barely moves."""
    found = by_code(diagnose(recorded("overfitting")))
    finding = found["reward_up_eval_flat"]
    reward, held_out, replies = finding.evidence
    assert reward.metric == "reward_mean" and numbers(reward)[0] < 0.1 and numbers(reward)[-1] > 0.9
    assert held_out.metric == "eval_reward_mean" and held_out.steps[0] == 0 and held_out.steps[-1] == 60
    assert held_out.values[-1] - held_out.values[0] < t.EVAL_FOLLOW_SHARE * 0.9  # type: ignore[operator]
    # what the reward paid for at the last step, quoted: the two training letters repeated
    kept = recorded("overfitting").replies
    assert replies.metric == "sample_replies" and replies.steps == [60] * len(kept) and kept
    assert replies.values == [score for score, _ in kept] and min(numbers(replies)) > 0.9
    assert all(repr(text[: t.QUOTED_REPLY_CHARS]) in replies.summary for _, text in kept)
    # the next step samples the trained weights beside the base model: the replies show what it learned
    assert finding.next_step.tool == "rl_test_inference" and finding.next_step.arguments == {
        "run_id": "run-overfitting"
    }
    # the jump to its two items came with a gradient spike and a drift that both passed
    assert "40.7 at step 19" in found["loss_unstable"].title and found["loss_unstable"].severity == "info"
    assert found["off_policy_drift"].severity == "info" and "since settled" in found["off_policy_drift"].title
    assert "groups_narrowing" not in found  # one reply per item, at nearly the full reward: converged, not collapsed


def test_unstable_run_spikes_and_its_eval_regresses() -> None:
    found = by_code(diagnose(recorded("unstable")))
    spikes = found["loss_unstable"]
    assert spikes.severity == "warning" and "99.7 at step 10" in spikes.title
    assert spikes.evidence[0].metric == "grad_norm" and spikes.evidence[0].steps == list(range(1, 11))
    assert spikes.next_step.arguments == {"field": "learning_rate", "value": 0.1}  # from 1.0
    regressed = found["eval_regressed"]
    assert regressed.evidence[0].metric == "eval_reward_mean"  # accuracy never left 0 on the tiny model
    assert "best 0.458 at step 9, now 0.000 at step 10" in regressed.evidence[0].summary
    # below its best at both evaluations after it (steps 12 and the final 10): a fall that holds, so the rate
    assert "stayed down over 2 evaluations" in regressed.title
    assert regressed.next_step.arguments == {"field": "lr_schedule", "value": "cosine"}


# --- the rules on synthetic rows -----------------------------------------------------------


def rows(n: int, **columns: Any) -> list[dict[str, Any]]:
    """n metrics lines, steps 1..n, 10 s apart; a column is a value or a function of the step."""
    return [
        {"step": s, "time": 1000.0 + 10 * s, **{k: v(s) if callable(v) else v for k, v in columns.items()}}
        for s in range(1, n + 1)
    ]


ENV = {"group_size": 8, "temperature": 1.0}
TINKER = {"learning_rate": 1e-3, "loss_fn": "importance_sampling"}


def facts(metrics: list[dict[str, Any]], evals: list[dict[str, Any]] | None = None, **kw: Any) -> RunFacts:
    kw.setdefault("now", metrics[-1]["time"] if metrics else 0.0)
    return RunFacts("r1", metrics, evals or [], kw.pop("env", ENV), kw.pop("tinker", TINKER), **kw)


def test_fewer_distinct_replies_at_the_full_reward_converged_short_of_it_collapsed() -> None:
    def fewer(reward: float) -> list[dict[str, Any]]:
        return rows(12, no_signal_share=0.0, distinct_reply_share=lambda s: 1.0 if s < 5 else 0.25, reward_mean=reward)

    assert diagnose(facts(fewer(t.CONVERGED_REWARD))) == []
    finding = by_code(diagnose(facts(fewer(0.6))))["groups_narrowing"]
    assert [e.metric for e in finding.evidence] == ["distinct_reply_share"]
    assert finding.next_step.arguments == {"field": "temperature", "value": 1.3}


def test_collapse_by_the_entropy_of_the_sampled_tokens() -> None:
    """Replies too long to repeat exactly: every one differs, yet the policy samples nearly one."""

    def entropy_to(late: float) -> list[dict[str, Any]]:
        return rows(12, distinct_reply_share=1.0, token_entropy=lambda s: 2.0 if s < 5 else late, reward_mean=0.3)

    assert 0.15 < 2.0 * t.COLLAPSED_ENTROPY_SHARE
    finding = by_code(diagnose(facts(entropy_to(0.15))))["groups_narrowing"]
    assert [e.metric for e in finding.evidence] == ["token_entropy"]
    assert "2 (steps 1-3) -> 0.15 nats (steps 10-12)" in finding.evidence[0].summary
    assert diagnose(facts(entropy_to(0.6))) == []  # 30%, as the healthy SmolLM2 run: surer, not collapsed


def test_narrowing_needs_signal_lost_not_only_fewer_distinct_replies() -> None:
    narrowing = rows(
        12,
        no_signal_share=lambda s: 0.0 if s < 5 else 0.75,
        distinct_reply_share=lambda s: 1.0 if s < 5 else 0.25,
        reward_mean=0.2,
    )
    finding = by_code(diagnose(facts(narrowing)))["groups_narrowing"]
    assert finding.severity == "warning"
    assert (
        finding.next_step.arguments == {"field": "temperature", "value": 1.3}
        and "easier items" in finding.next_step.why
    )
    assert {e.metric for e in finding.evidence} == {"no_signal_share", "distinct_reply_share"}
    # an environment without a temperature field: more samples per group instead
    no_temp = by_code(diagnose(facts(narrowing, env={"group_size": 8})))["groups_narrowing"]
    assert no_temp.next_step.arguments == {"field": "group_size", "value": 16}


def test_most_groups_without_signal_on_the_latest_steps() -> None:
    finding = by_code(diagnose(facts(rows(4, no_signal_share=lambda s: 0.0 if s == 1 else 0.75))))["groups_narrowing"]
    assert "75% of groups all-equal over steps 2-4" in finding.evidence[0].summary
    assert finding.next_step.arguments == {"field": "group_size", "value": 16}


def test_no_step_yet_and_the_environment_drops_equal_groups() -> None:
    found = diagnose(facts([], active=True, env_drops_equal_groups=True))
    assert [f.code for f in found] == ["no_reward_signal"] and "scored the same" in found[0].title


def test_no_step_yet_whose_groups_tie_at_zero_names_the_cause_and_at_the_top_says_solved() -> None:
    """items.json's ties: at zero, a reward that never pays, or no valid action where every reply's
    calls failed; at the top, the items are solved (not a broken reward)."""

    def ties(top: int, zero: int, refused: int = 0) -> ItemCounts:
        counts = ("product", 8, 8, 0, 0, False, top + zero, top, zero, 0, 100, 100)
        return ItemCounts(*counts, tied_at_zero_refused=refused)

    for counts, title in (
        (ties(0, 8), "no reply earns any reward"),
        (ties(0, 8, refused=8), "no reply made a valid action"),
    ):
        found = by_code(diagnose(facts([], active=True, items=counts)))
        assert list(found) == ["no_reward_signal"] and title in found["no_reward_signal"].title
        assert "8 at zero" in found["no_reward_signal"].evidence[0].summary
    found = by_code(diagnose(facts([], active=True, env_drops_equal_groups=True, items=ties(8, 0))))
    assert list(found) == ["items_solved"] and "8 at the top reward" in found["items_solved"].evidence[0].summary


def test_a_run_whose_other_groups_still_teach_is_not_called_solved() -> None:
    """bench/item_signal.py's mcp:time run after a stage: 32 of 46 groups tied, 29 at the top, and the
    other 14 still had a spread to learn from (7 steps); all but 4 of 36 tied is solved."""
    metrics = rows(7, reward_mean=0.9)

    def counts(groups: int, top: int) -> ItemCounts:
        return ItemCounts("product", 64, 64, 0, 0, False, groups, top, 0, 3, 24795, 17292)

    assert "items_solved" not in by_code(diagnose(facts(metrics, active=True, items=counts(46, 29))))
    assert "items_solved" in by_code(diagnose(facts(metrics, active=True, items=counts(36, 29))))


def test_reward_up_eval_flat() -> None:
    metrics = rows(12, reward_mean=lambda s: 0.1 if s < 5 else 0.6)
    flat = [{"step": 0, "eval_accuracy": 0.25}, {"step": 12, "eval_accuracy": 0.25, "final": True}]
    finding = by_code(diagnose(facts(metrics, flat)))["reward_up_eval_flat"]
    assert finding.next_step.tool == "rl_test_inference"
    assert finding.next_step.arguments == {"run_id": "r1"}
    followed = [{"step": 0, "eval_accuracy": 0.25}, {"step": 12, "eval_accuracy": 0.5}]
    assert "reward_up_eval_flat" not in by_code(diagnose(facts(metrics, followed)))


def test_eval_regressed_keeps_the_best_checkpoint() -> None:
    metrics = rows(12, reward_mean=0.3)
    evals = [{"step": 0, "eval_accuracy": 0.1}, {"step": 6, "eval_accuracy": 0.5}, {"step": 12, "eval_accuracy": 0.3}]
    finding = by_code(diagnose(facts(metrics, evals)))["eval_regressed"]
    assert finding.next_step.tool == "rl_export_model" and finding.next_step.arguments == {
        "run_id": "r1",
        "checkpoint": 6,
    }
    one_item = [{"step": 0, "eval_accuracy": 0.5}, {"step": 12, "eval_accuracy": 0.5 - 1 / 12}]
    assert "eval_regressed" not in by_code(diagnose(facts(metrics, one_item)))
    worse_than_base = [{"step": 0, "eval_accuracy": 0.5}, {"step": 12, "eval_accuracy": 0.2}]
    base = by_code(diagnose(facts(metrics, worse_than_base)))["eval_regressed"]
    assert base.next_step.arguments == {"field": "learning_rate", "value": 1e-4}


def test_loss_not_finite_and_gradient_explosion() -> None:
    nan = rows(4, loss=lambda s: math.nan if s == 3 else 0.1, grad_norm=1.0)
    finding = by_code(diagnose(facts(nan)))["loss_unstable"]
    assert finding.severity == "error" and finding.evidence[0].steps == [3] and finding.evidence[0].values == [None]
    assert finding.next_step.arguments == {"field": "learning_rate", "value": 1e-4}
    unread = by_code(diagnose(facts(nan, tinker={})))["loss_unstable"]  # no run config: read the value first
    assert unread.next_step.tool == "rl_get_current_config"
    exploding = rows(12, grad_norm=lambda s: 1.0 if s < 9 else 1.0 * t.GRAD_NORM_EXPLOSION * 2)
    assert by_code(diagnose(facts(exploding)))["loss_unstable"].severity == "warning"
    assert "loss_unstable" not in by_code(diagnose(facts(rows(12, grad_norm=lambda s: 1.0 + s % 3))))


def test_a_gradient_spike_that_passed() -> None:
    spiked = by_code(diagnose(facts(rows(12, grad_norm=lambda s: t.GRAD_NORM_SPIKE if s == 5 else 1.0))))
    finding = spiked["loss_unstable"]
    assert finding.severity == "info" and finding.title == (
        "Gradient norm spiked: 4 at step 5, 4x its median before; 1 at step 12"
    )
    assert finding.next_step.arguments == {"field": "learning_rate", "value": 1e-4}
    below = rows(12, grad_norm=lambda s: 0.9 * t.GRAD_NORM_SPIKE if s == 5 else 1.0)
    assert diagnose(facts(below)) == []


def test_off_policy_drift() -> None:
    finding = by_code(diagnose(facts(rows(6, logprob_drift=0.5))))["off_policy_drift"]
    assert finding.next_step.arguments == {"field": "loss_fn", "value": "ppo"}
    ppo = by_code(diagnose(facts(rows(6, logprob_drift=0.5), tinker={"learning_rate": 1e-3, "loss_fn": "ppo"})))
    assert ppo["off_policy_drift"].next_step.arguments["field"] == "learning_rate"
    assert diagnose(facts(rows(6, logprob_drift=t.DRIFT_WARN / 2))) == []


def test_a_drift_that_passed() -> None:
    passed = rows(12, logprob_drift=lambda s: 1.0 if 3 <= s <= 6 else 0.01)
    finding = by_code(diagnose(facts(passed)))["off_policy_drift"]
    assert finding.severity == "info" and "over steps 3-6" in finding.title and "since settled" in finding.title
    assert finding.evidence[0].steps == [3, 4, 5, 6] and finding.evidence[1].steps == [10, 11, 12]
    assert finding.next_step.arguments == {"field": "loss_fn", "value": "ppo"}
    blip = rows(12, logprob_drift=lambda s: 2 * t.DRIFT_WARN if s == 4 else 0.01)  # one step: its window stays low
    assert diagnose(facts(blip)) == []


def test_a_sampler_mismatch_that_grows() -> None:
    """vLLM against the trainer on the same weights: steady at bfloat16's 0.005 is no finding; growing to
    ten times that is, with cispo (truncated importance ratios) as the next step."""
    assert diagnose(facts(rows(12, sampler_mismatch=0.005))) == []
    growing = rows(12, sampler_mismatch=lambda s: 0.005 if s <= 4 else 0.08)
    finding = by_code(diagnose(facts(growing)))["sampler_mismatch"]
    assert finding.severity == "warning" and "0.080 nats a token over steps 10-12" in finding.title, finding.title
    assert finding.next_step.arguments == {"field": "loss_fn", "value": "cispo"}
    assert [e.steps for e in finding.evidence] == [[1, 2, 3], [10, 11, 12]]
    cispo = by_code(diagnose(facts(growing, tinker={"learning_rate": 1e-3, "loss_fn": "cispo"})))
    assert cispo["sampler_mismatch"].next_step.arguments["field"] == "learning_rate"
    high_from_the_start = rows(12, sampler_mismatch=0.08)  # not growing: a model whose kernels differ this much
    assert "sampler_mismatch" not in by_code(diagnose(facts(high_from_the_start)))


def test_stalled_and_slowed_down() -> None:
    metrics = rows(6, step_seconds=10.0)
    assert diagnose(facts(metrics, active=True, now=metrics[-1]["time"] + 60)) == []
    late = by_code(diagnose(facts(metrics, active=True, now=metrics[-1]["time"] + 600)))["stalled"]
    assert "Step 7 is overdue" in late.title and late.next_step.arguments == {"uri": "rl://runs/r1/logs/env"}
    assert diagnose(facts(metrics, active=False, now=metrics[-1]["time"] + 600)) == []  # an ended run is not late
    finishing = rows(6, step_seconds=10.0, total_steps=6)  # every step done: the final eval runs
    assert diagnose(facts(finishing, active=True, now=finishing[-1]["time"] + 600)) == []
    never = diagnose(facts([], active=True, running_since=0.0, now=t.FIRST_STEP_STALL_SECONDS + 1))
    assert [f.code for f in never] == ["stalled"]
    slow = rows(12, step_seconds=lambda s: 2.0 if s < 7 else 20.0, wait_seconds=lambda s: 1.0 if s < 7 else 18.0)
    finding = by_code(diagnose(facts(slow)))["throughput_drop"]
    assert finding.evidence[1].metric == "wait_seconds" and finding.next_step.arguments["uri"].endswith("/logs/env")


def test_sequences_past_the_trainers_limit_come_under_it_where_the_environment_can() -> None:
    """The trainer's max_token_trainer_length is the profile's (every shipped profile locks it): an
    agent's turns stop within its max_token_length, so that comes down to the limit; another
    environment's rollouts are read first."""
    too_long = Discards(5, 5, 0, None, 0.0, ["x"] * 2, [0.0, 1.0], too_long=(1100, 1024))

    def next_step(env: dict[str, Any]) -> NextStep:
        found = by_code(
            diagnose(facts([], env={**ENV, "max_token_length": 2048, **env}, discards=too_long, active=True))
        )
        return found["groups_discarded"].next_step

    assert next_step({"max_agent_turns": 3}).arguments == {"field": "max_token_length", "value": 1024}
    read = next_step({})
    assert read.tool == "rl_test_inference" and "max_token_trainer_length, set by the profile" in read.why


# --- the notification, through a real server, client and run ----------------------------------


@pytest.mark.slow
@pytest.mark.anyio
@pytest.mark.filterwarnings("ignore:resources/subscribe is removed", "ignore:The logging capability is deprecated")
async def test_finding_sent_once_to_a_subscribed_client(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "RL_MCP_HOME": str(tmp_path / "home"),
        "RL_MCP_PROFILE": "local",
        "RL_MCP_ENV_DIRS": str(CONSTANT_ENV_DIR),
        "RL_MCP_STATUS_MIN_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
    }
    received: list[Any] = []
    received_quiet: list[Any] = []

    async def on_log(params: Any) -> None:
        received.append(params)

    async def on_quiet_log(params: Any) -> None:
        received_quiet.append(params)

    async with open_app(Settings.from_env(env, stop_runs_on_exit=True)) as app:
        server = build_server(app)
        async with (
            Client(server) as client,
            Client(server, mode="legacy", logging_callback=on_log) as legacy,
            Client(server, mode="legacy", logging_callback=on_quiet_log) as quiet,
        ):
            assert legacy.server_capabilities is not None and legacy.server_capabilities.logging is not None
            await legacy.set_logging_level("warning")
            await quiet.set_logging_level("critical")  # above every finding: told nothing

            async def call(tool: str, **args: Any) -> dict[str, Any]:
                result = await client.call_tool(tool, args)
                assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
                return result.structured_content or {}

            await call("rl_select_environment", name="constant_reward")
            # long enough for a diagnosis tick (every 2 s) while it runs: a 4-step run ended before one
            for field, value in {"total_steps": 12, "group_size": 4, "batch_size": 8}.items():
                await call("rl_edit_config", field=field, value=value)
            run = await call("rl_start_training")
            await legacy.subscribe_resource(f"rl://runs/{run['run_id']}/metrics")
            await legacy.subscribe_resource(f"rl://runs/{run['run_id']}/logs/trainer")  # one client: told once
            await quiet.subscribe_resource(f"rl://runs/{run['run_id']}")
            with anyio.fail_after(240):
                while (status := await call("rl_check_status", run_id=run["run_id"]))["status"] != "completed":
                    assert status["status"] in ("starting", "running", "stopping"), status
                    await anyio.sleep(1)
                await anyio.sleep(3)  # one more diagnosis tick after the last step
            codes = [f["code"] for f in status["findings"]]
            assert codes[0] == "no_reward_signal", codes
            results = await call("rl_get_results", run_id=run["run_id"])
            assert [f["code"] for f in results["findings"]] == codes
            # the 2026 revision deprecates logging: a 2026-era client, with no notice stream, reads every
            # finding and its next step in the answers and in the run's (subscribable) resource
            assert client.protocol_version == "2026-07-28"
            read = await client.read_resource(f"rl://runs/{run['run_id']}")
            resource = json.loads(read.contents[0].text)  # type: ignore[union-attr]
            # the finding's next step, called as it stands, shows the cause: every reply scores 1.0
            next_step = status["findings"][0]["next_step"]
            test = await call(next_step["tool"], **next_step["arguments"])
            scores = {x for r in test["results"] for group in r["step_scores"] for x in group}
            assert test["environment_working"] and scores == {1.0}, test
            # the recorded runs' edits are valid rl_edit_config calls for letter_repeat's fields
            await call("rl_select_environment", name="letter_repeat")
            steps = [f.next_step for name in ("collapsing", "collapsed_replies") for f in diagnose(recorded(name))]
            steps.append(by_code(diagnose(facts(rows(4, loss=math.nan))))["loss_unstable"].next_step)
            edits = [s.arguments for s in steps if s.tool == "rl_edit_config"]
            assert {e["field"] for e in edits} == {"temperature", "loss_fn", "learning_rate"}
            for edit in edits:
                await call("rl_edit_config", **edit)

    # diagnosed every 2 s through the run, sent once: the notifier remembers only through the run folder's
    # findings_sent.json, as a restarted server does
    notices = [p for p in received if p.logger == LOGGER]
    assert len(notices) == 1, [p.data for p in notices]
    assert received_quiet == []
    assert notices[0].level == "error" and notices[0].data["run_id"] == run["run_id"]
    assert notices[0].data["finding"]["code"] == "no_reward_signal"
    assert notices[0].data["finding"]["next_step"]["tool"] == "rl_test_inference"
    assert sent_codes(RunFiles(Path(run["run_dir"])).findings_sent) == {"no_reward_signal"}
    noticed = notices[0].data["finding"]
    for carried in (status["findings"], results["findings"], resource["findings"]):
        same = next(f for f in carried if f["code"] == noticed["code"])
        assert (same["severity"], same["next_step"]) == (noticed["severity"], noticed["next_step"])
        # the evidence a notice carried is there still (a finding may gather more as the run goes on)
        assert {e["metric"] for e in noticed["evidence"]} <= {e["metric"] for e in same["evidence"]}


@pytest.mark.anyio
async def test_a_run_that_ended_since_the_last_pass_is_diagnosed_once_more() -> None:
    """A run leaves the supervised list the moment it ends: its last findings come from one more pass."""

    def record(run_id: str) -> RunRecord:
        return RunRecord(run_id, "constant_reward", "local", "running", "/runs/x", "/runs/x.yaml", run_id, 4, 0, 0, 0.0)

    a, b = record("a"), record("b")
    supervised_by_pass = [[a, b], [b], [b], [], []]
    passes: list[set[str]] = []

    class Recorded(FindingNotices):
        async def check(self, rec: RunRecord) -> list[Finding]:
            passes[-1].add(rec.run_id)
            return []

    with anyio.CancelScope() as scope:

        def supervised() -> list[RunRecord]:
            if len(passes) == len(supervised_by_pass):
                scope.cancel()
                return []
            passes.append(set())
            return supervised_by_pass[len(passes) - 1]

        await Recorded(ResourcePublisher(InMemorySubscriptionBus()), MetricsCache()).run(supervised, interval_s=0)
    assert passes == [{"a", "b"}, {"a", "b"}, {"b"}, {"b"}, set()]


def test_a_run_that_never_calls_a_tool_is_told_so_not_that_the_reward_is_broken() -> None:
    """As a verifiers ToolEnv on SmolLM2 did: 0 tool calls in 2 steps, every group all-equal."""
    silent = rows(2, agent_tool_calls_mean=0.0, no_signal_share=1.0, reward_std=0.0, reward_mean=0.0)
    found = by_code(diagnose(facts(silent, env={**ENV, "demonstrations_per_group": 0, "system_prompt": None})))
    assert "no_reward_signal" not in found
    finding = found["no_tool_calls"]
    assert finding.severity == "error" and "no tool call" in finding.title
    assert finding.next_step.arguments == {"field": "demonstrations_per_group", "value": 1}
    assert "not broken" in finding.next_step.why and "partial credit" in finding.next_step.why
    called = rows(2, agent_tool_calls_mean=lambda s: 0.5 * (s - 1), no_signal_share=1.0, reward_std=0.0)
    assert "no_tool_calls" not in by_code(diagnose(facts(called)))


def test_a_run_with_no_step_yet_whose_model_calls_no_tool_is_told_so() -> None:
    """Before any step: the base model's evaluation made no tool call and every group since was
    dropped as all-equal. The cause is named, not the reward; once the evaluation shows calls, the
    reward is what to read."""
    env = {**ENV, "demonstrations_per_group": 0, "system_prompt": "Do the task."}
    evals = [{"step": 0, "eval_accuracy": 0.0, "eval_tool_call_share": 0.0, "num_items": 3}]
    waiting = {"active": True, "env_drops_equal_groups": True, "env": env}
    found = by_code(diagnose(facts([], evals, **waiting)))
    assert "no_reward_signal" not in found
    finding = found["no_tool_calls"]
    assert finding.title.startswith("No step yet") and finding.evidence[0].metric == "eval_tool_call_share"
    assert finding.next_step.arguments == {"field": "demonstrations_per_group", "value": 1}
    calling = [{**evals[0], "eval_tool_call_share": 0.5}]
    assert set(by_code(diagnose(facts([], calling, **waiting)))) == {"no_reward_signal"}
    assert "no_tool_calls" not in by_code(diagnose(facts([], evals, **{**waiting, "env_drops_equal_groups": False})))
