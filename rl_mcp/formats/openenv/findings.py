"""The rule on OpenEnv runs whose environment never ends an episode itself (`done`): every episode
ran to the turn limit or the model's own last word, so the reward the environment pays at its end
(a `submit`, a last move) is never reached."""

from __future__ import annotations

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts, evidence_of, span_of
from rl_mcp.diagnosis.findings import Finding
from rl_mcp.diagnosis.next_steps import edit
from rl_mcp.runs.metrics import Points, series
from tinker_atropos.openenv import EPISODE_DONE


def _done_shares(facts: RunFacts) -> Points:
    rows = [
        {"step": m.get("step"), EPISODE_DONE: (m.get("env_metrics") or {}).get(EPISODE_DONE)} for m in facts.metrics
    ]
    return series(rows, EPISODE_DONE)


def episodes_never_done(facts: RunFacts) -> Finding | None:
    """MIN_WINDOW_STEPS steps or more, tool calls made, and not one episode ended by the environment."""
    shares = _done_shares(facts)
    calls = series(facts.metrics, "agent_tool_calls_mean")
    if len(shares) < t.MIN_WINDOW_STEPS or any(v > 0 for _, v in shares) or not any(v > 0 for _, v in calls):
        return None
    turns = int(facts.env.get("max_agent_turns") or 1)
    step = edit(
        "max_agent_turns",
        turns * 2,
        "the environment never said `done`: each episode ended at the turn limit or when the model stopped "
        "calling tools. Give episodes more turns, or check that the environment sets `done` when its task ends",
    )
    evidence = evidence_of(EPISODE_DONE, shares, f"no episode ended by the environment over {span_of(shares)}")
    return Finding("openenv_never_done", "warning", "The environment never ended an episode itself", step, [evidence])
