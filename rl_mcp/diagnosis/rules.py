"""The diagnosis rules: one function per rule over a run's metrics rows, eval rows, config and timing.

Pure: the facts come in as plain values (`facts.RunFacts`), findings go out; reading files is
`inputs.py`'s job. Each rule returns at most one finding whose next step is a valid call of this
server's tools for the run's environment (config fields it really has).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable
from typing import Any

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.agent_rules import no_tool_calls
from rl_mcp.diagnosis.collapse import collapse_evidence, converged
from rl_mcp.diagnosis.curve_rules import eval_metric, eval_regressed
from rl_mcp.diagnosis.distill_rules import teacher_kl_flat, teacher_no_better
from rl_mcp.diagnosis.facts import RunFacts, evidence_of, mean_of, sample_replies, span_of, window
from rl_mcp.diagnosis.findings import Evidence, Finding, NextStep
from rl_mcp.diagnosis.next_steps import edit
from rl_mcp.diagnosis.request_rules import requests_time_out
from rl_mcp.diagnosis.sampler_rules import sampler_mismatch_grows
from rl_mcp.diagnosis.sft_rules import sft_left_no_signal, sft_memorized, sft_taught_no_tool_calls
from rl_mcp.diagnosis.tie_rules import items_solved, ties_at_top, ties_evidence
from rl_mcp.diagnosis.update_rules import loss_unstable, off_policy_drift
from rl_mcp.formats import rules as format_rules
from rl_mcp.runs.metrics import series


def _test_reward(facts: RunFacts, why: str) -> NextStep:
    group = facts.env.get("group_size")
    args: dict[str, Any] = {"num_steps": 3, **({"group_size": int(group)} if isinstance(group, int) else {})}
    return NextStep("rl_test_inference", args, why)


# --- signal ---------------------------------------------------------------------------------


def _widen_groups(facts: RunFacts, *, collapsed: bool, equal_groups: bool = True) -> NextStep:
    """Collapsed replies: a higher temperature where the environment has one; else more samples per
    group. `equal_groups`: groups whose replies all scored the same, which harder or easier items
    (by the reward) also make rarer."""
    temperature, group = facts.env.get("temperature"), facts.env.get("group_size")
    rewards = series(facts.metrics, "reward_mean")[-t.MIN_WINDOW_STEPS :]
    harder = "harder items" if rewards and mean_of(rewards) > t.MOSTLY_RIGHT_REWARD else "easier items"
    items = f" or {harder}" if equal_groups else ""
    if collapsed and isinstance(temperature, (int, float)):
        return edit(
            "temperature",
            round(temperature + t.TEMPERATURE_STEP, 2),
            f"sample more varied replies (from {temperature}); more samples per group{items} also widen groups",
        )
    size = min(int(group) * 2, t.MAX_GROUP_SIZE) if isinstance(group, int) else 16
    why = f"more samples per group: more varied replies, fewer all-equal groups (from {group}){items}"
    return edit("group_size", size, why)


def taught(facts: RunFacts) -> bool:
    """A teacher's signal trains every group, tied ones too (trainer.teacher with distill_coef > 0)."""
    coef = facts.trainer.get("distill_coef", 1.0)
    return bool(facts.trainer.get("teacher")) and isinstance(coef, (int, float)) and coef > 0


def no_reward_signal(facts: RunFacts) -> Finding | None:
    """All-equal groups from the first step on: the environment's reward gives nothing to learn from
    (unless no rollout called a tool: `no_tool_calls` says why; or they tie at the top:
    `items_solved`; or a teacher's signal trains the tied groups)."""
    if no_tool_calls(facts) is not None or ties_at_top(facts) or taught(facts):
        return None
    next_step = _test_reward(
        facts, "score a few groups and read the samples: a reward that gives every reply the same score is broken"
    )
    shares = series(facts.metrics, "no_signal_share")
    if not shares:
        c = facts.items
        at_zero = (
            c is not None and c.tied_at_zero >= t.ONE_END_MIN_TIES and c.tied_at_zero >= t.ONE_END_TIE_SHARE * c.ties
        )
        if not (facts.active and not facts.metrics and (facts.env_drops_equal_groups or at_zero)):
            return None
        dropping = "atroposlib logs 'Scores are the same in a group, skipping' and sends nothing"
        log = Evidence("env.log", [], [], dropping)
        refused = at_zero and c is not None and c.tied_at_zero_refused >= t.REFUSED_ZERO_TIE_SHARE * c.tied_at_zero
        title = (
            "No step yet: every group ties at zero, and no reply made a valid action (each call failed)"
            if refused
            else "No step yet: every group ties at zero (no reply earns any reward), so the environment drops it"
            if at_zero
            else "No step yet: the environment drops every group because all its replies scored the same"
        )
        if refused:
            next_step = _test_reward(
                facts, "read the samples' tool errors: the environment refuses every action the model writes"
            )
        return Finding("no_reward_signal", "error", title, next_step, ties_evidence(facts) or [log])
    w = min(window(shares), len(shares))
    first, recent = shares[:w], shares[-w:]
    if min(v for _, v in first + recent) < t.FLAT_NO_SIGNAL_SHARE:
        return None
    stds = series(facts.metrics, "reward_std")[:w]
    summary = f"{mean_of(first):.0%} of groups all-equal over {span_of(first)}"
    evidence = [evidence_of("no_signal_share", first, summary)]
    if recent[0][0] > first[-1][0]:
        evidence.append(evidence_of("no_signal_share", recent, f"still {mean_of(recent):.0%} over {span_of(recent)}"))
    if stds:
        evidence.append(evidence_of("reward_std", stds, f"reward spread {max(v for _, v in stds):.3g} at most"))
    return Finding(
        "no_reward_signal",
        "error",
        "The reward gives no learning signal from the start",
        next_step,
        [*evidence, *ties_evidence(facts)],
    )


def groups_narrowing(facts: RunFacts) -> Finding | None:
    """More groups without signal, or replies collapsed to a few short of the full reward: the policy
    stops exploring. Fewer distinct replies alone, at nearly the full reward, is a policy that found
    its answer."""
    if no_reward_signal(facts) is not None:
        return None
    shares = series(facts.metrics, "no_signal_share")
    evidence: list[Evidence] = []
    rose = False
    if shares:
        w = min(window(shares), len(shares))
        first, recent = shares[:w], shares[-w:]
        rose = len(shares) >= t.MIN_TREND_STEPS and mean_of(recent) - mean_of(first) >= t.NO_SIGNAL_RISE
        if mean_of(recent) > t.NARROWING_NO_SIGNAL_SHARE or rose:
            rise = f", up from {mean_of(first):.0%} over {span_of(first)}" if len(shares) >= t.MIN_TREND_STEPS else ""
            summary = f"{mean_of(recent):.0%} of groups all-equal over {span_of(recent)}{rise}"
            evidence.append(evidence_of("no_signal_share", recent, summary))
    equal_groups = bool(evidence)
    collapsed = collapse_evidence(facts) if rose or not converged(facts) else []
    evidence += collapsed
    if not evidence:
        return None
    next_step = _widen_groups(facts, collapsed=bool(collapsed), equal_groups=equal_groups)
    if not collapsed:
        title = "most groups give no learning signal"
    elif equal_groups:
        title = "replies collapse to a few and groups stop giving a signal"
    else:
        title = "replies collapse to a few short of the full reward (their scores still differ slightly)"
    return Finding("groups_narrowing", "warning", "Groups are narrowing: " + title, next_step, evidence)


# --- evaluation -----------------------------------------------------------------------------


def reward_up_eval_flat(facts: RunFacts) -> Finding | None:
    """Training reward up, the evaluations flat or down: overfitting, or a reward the replies game."""
    rewards = series(facts.metrics, "reward_mean")
    name, evals = eval_metric(facts.curve)
    if len(rewards) < t.MIN_TREND_STEPS or len(evals) < 2 or evals[-1][0] <= evals[0][0]:
        return None
    w = window(rewards)
    first, recent = rewards[:w], rewards[-w:]
    gain, eval_gain = mean_of(recent) - mean_of(first), evals[-1][1] - evals[0][1]
    if gain < t.REWARD_RISE or eval_gain >= t.EVAL_FOLLOW_SHARE * gain:
        return None
    step = evals[-1][0]
    return Finding(
        "reward_up_eval_flat",
        "warning",
        "Training reward rose but the held-out eval did not follow (overfitting or reward hacking)",
        NextStep(
            "rl_test_inference",
            {"run_id": facts.run_id},
            "read the newest trained weights' sample replies beside the base model's: replies that score without doing "
            "the task are reward hacking (fix the reward); right replies that do not carry to held-out items are "
            "overfitting (more items, fewer steps)",
        ),
        [
            evidence_of(
                "reward_mean",
                first + recent,
                f"reward {mean_of(first):.3f} ({span_of(first)}) -> {mean_of(recent):.3f} ({span_of(recent)})",
            ),
            evidence_of(
                name,
                evals,
                f"{name} {evals[0][1]:.3f} (step {evals[0][0]}) -> {evals[-1][1]:.3f} (step {step}): "
                f"{eval_gain:+.3f} against the training reward's {gain:+.3f}",
            ),
            *sample_replies(facts),
        ],
    )


# --- time -----------------------------------------------------------------------------------


def stalled(facts: RunFacts) -> Finding | None:
    """An active run whose next step is long overdue (or whose first step never came), where no
    cause is known (requests that time out have their own finding)."""
    if not facts.active:
        return None
    logs = NextStep("resources/read", {"uri": f"rl://runs/{facts.run_id}/logs/env"}, "")
    times = series(facts.metrics, "time")
    r = facts.requests
    if r is not None and r.last_timeout_at and (not times or r.last_timeout_at > times[-1][1]):
        return None  # requests_time_out says why
    if not times:
        if facts.running_since is None or facts.now - facts.running_since < t.FIRST_STEP_STALL_SECONDS:
            return None
        waited = facts.now - facts.running_since
        why = "see whether the environment scores rollouts (rl_check_status's environment_error, logs/trainer too)"
        return Finding(
            "stalled",
            "warning",
            f"No training step {waited:.0f} s after the run began",
            NextStep(logs.tool, logs.arguments, why),
            [Evidence("time", [], [], f"running for {waited:.0f} s without a metrics line")],
        )
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(times)]
    typical = statistics.median(gaps) if gaps else mean_of(series(facts.metrics, "step_seconds") or [(0, 0.0)])
    since = facts.now - times[-1][1]
    total = facts.metrics[-1].get("total_steps")
    if isinstance(total, int) and times[-1][0] >= total:  # every step is done: the final eval and the end take time
        return None
    if since < max(t.STALL_FACTOR * typical, t.STALL_MIN_SECONDS):
        return None
    title = f"Step {times[-1][0] + 1} is overdue: no step for {since:.0f} s (typically {typical:.0f} s)"
    next_step = NextStep(
        logs.tool, logs.arguments, "find where it waits: rollouts (logs/env) or the trainer (logs/trainer)"
    )
    if facts.env_drops_equal_groups:  # the policy collapsed: every group's replies score the same
        title += ": the environment drops every group as all-equal (the replies collapsed)"
        next_step = _widen_groups(facts, collapsed=True)
    return Finding(
        "stalled",
        "warning",
        title,
        next_step,
        [
            Evidence(
                "time",
                [times[-1][0]],
                [times[-1][1]],
                f"{since:.0f} s since step {times[-1][0]}; median step {typical:.1f} s",
            )
        ],
    )


def _within_the_trainer(facts: RunFacts, longest: int, limit: int) -> NextStep:
    """Sequences the trainer does not take. Its max_token_trainer_length is the operator's (every
    shipped profile locks it), so the environment's sequences come under it: an agent's stop within
    its max_token_length; another's are read first (a long prompt, many turns, long replies)."""
    why = (
        f"a sequence took {longest} tokens and the trainer takes fewer than {limit} "
        "(max_token_trainer_length, set by the profile)"
    )
    context = facts.env.get("max_token_length")
    if "max_agent_turns" in facts.env and isinstance(context, int) and context > limit:
        return edit("max_token_length", limit, f"{why}: an agent's turns stop within its max_token_length")
    return _test_reward(
        facts,
        f"{why}: read the rollouts and shorten what takes the room (the prompt, the replies, the turns), or "
        "use a profile that allows more",
    )


def groups_discarded(facts: RunFacts) -> Finding | None:
    """An active run whose environment discards group after group: its rollouts return no group and
    raise nothing (Atropos' own environments skip groups whose scores are all equal)."""
    d = facts.discards
    if not facts.active or d is None or d.in_a_row < t.DISCARDED_IN_A_ROW:
        return None
    if d.too_long:
        next_step = _within_the_trainer(facts, *d.too_long)
    elif d.scores and len(set(d.scores)) == 1:
        next_step = _widen_groups(facts, collapsed=True)
    else:
        next_step = _test_reward(facts, "read the replies the environment discards and how it scores them")
    return Finding(
        "groups_discarded",
        "error" if d.groups_scored == 0 else "warning",
        f"The environment discarded its last {d.in_a_row} groups ({d.groups_scored} scored in all)"
        + (f": likely {d.likely_cause}" if d.likely_cause else ": its rollouts return no group"),
        next_step,
        [Evidence("env_health.discarded_in_a_row", [], [float(d.in_a_row)], d.line)],
    )


PHASES = ("wait_seconds", "forward_backward_seconds", "optim_seconds", "publish_seconds")


def throughput_drop(facts: RunFacts) -> Finding | None:
    """Recent steps much slower than the first ones (waiting for the batch included); names the
    phase that grew most."""
    waits = dict(series(facts.metrics, "wait_seconds"))
    secs = [(step, v + waits.get(step, 0.0)) for step, v in series(facts.metrics, "step_seconds")]
    if len(secs) < t.MIN_TREND_STEPS:
        return None
    w = window(secs)
    first, recent = secs[:w], secs[-w:]
    before, after = statistics.median(v for _, v in first), statistics.median(v for _, v in recent)
    if after < t.SLOWDOWN_FACTOR * before or after - before < t.SLOWDOWN_MIN_SECONDS:
        return None
    growth = {}
    for name in PHASES:
        points = series(facts.metrics, name)
        if len(points) >= t.MIN_TREND_STEPS:
            growth[name] = mean_of(points[-w:]) - mean_of(points[:w])
    phase = max(growth, key=lambda k: growth[k]) if growth else None
    evidence = [
        evidence_of(
            "wait_seconds + step_seconds",
            first + recent,
            f"median {before:.1f} s a step ({span_of(first)}) -> {after:.1f} s ({span_of(recent)})",
        )
    ]
    if phase:
        evidence.append(
            Evidence(phase, [], [round(growth[phase], 3)], f"{phase} grew most: +{growth[phase]:.1f} s a step")
        )
    log = "env" if phase == "wait_seconds" else "trainer"
    return Finding(
        "throughput_drop",
        "warning",
        f"Steps slowed down {after / max(before, 1e-9):.0f}x since the start",
        NextStep(
            "resources/read",
            {"uri": f"rl://runs/{facts.run_id}/logs/{log}"},
            "waiting for rollouts: the environment is slow (longer replies, a slow tool); else the trainer: longer "
            "sequences or a machine under load",
        ),
        evidence,
    )


RULES: tuple[Callable[[RunFacts], Finding | None], ...] = (
    sft_taught_no_tool_calls,
    sft_memorized,
    sft_left_no_signal,
    items_solved,
    no_tool_calls,
    *format_rules(),  # those a format adds (OpenEnv: episodes the environment never ends)
    no_reward_signal,
    groups_narrowing,
    reward_up_eval_flat,
    eval_regressed,
    loss_unstable,
    off_policy_drift,
    sampler_mismatch_grows,
    teacher_no_better,
    teacher_kl_flat,
    stalled,
    groups_discarded,
    throughput_drop,
    requests_time_out,
)


def diagnose(facts: RunFacts) -> list[Finding]:
    """Every rule's finding, the most severe first."""
    found = [f for rule in RULES if (f := rule(facts)) is not None]
    return sorted(found, key=lambda f: -f.rank)
