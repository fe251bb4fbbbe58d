"""The rule on hermes-tasks runs whose Hermes episodes failed or ran out of time: episodes that end so
score 0 whatever the model did, so a share of them is noise in the reward, and all of them no signal."""

from __future__ import annotations

from rl_mcp.diagnosis.facts import RunFacts, evidence_of, span_of
from rl_mcp.diagnosis.findings import Finding, NextStep
from rl_mcp.runs.metrics import Points, series

FAILED, TIMED_OUT = "hermes_failed_share", "hermes_timed_out_share"


def _shares(facts: RunFacts, name: str) -> Points:
    rows = [{"step": m.get("step"), name: (m.get("env_metrics") or {}).get(name)} for m in facts.metrics]
    return series(rows, name)


def hermes_episodes_failed(facts: RunFacts) -> Finding | None:
    """Any step whose episodes Hermes failed (its stderr tail is in the environment's log) or cut at the
    task file's time limit."""
    failed, cut = _shares(facts, FAILED), _shares(facts, TIMED_OUT)
    if not any(v > 0 for _, v in failed) and not any(v > 0 for _, v in cut):
        return None
    evidence = [
        evidence_of(name, points, f"mean share {sum(v for _, v in points) / len(points):.2f} over {span_of(points)}")
        for name, points in ((FAILED, failed), (TIMED_OUT, cut))
        if any(v > 0 for _, v in points)
    ]
    why = (
        "episodes that fail or run out of time score 0: read Hermes' stderr tail in the environment's log "
        "(a failed start, an unreachable model); for cut episodes raise episode_timeout_s or lower max_turns "
        "in the task file, or lower max_turn_tokens"
    )
    step = NextStep("resources/read", {"uri": f"rl://runs/{facts.run_id}/logs/env"}, why)
    return Finding("hermes_episodes_failed", "warning", "Hermes episodes failed or ran out of time", step, evidence)
