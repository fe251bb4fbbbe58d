"""The diagnosis of OpenEnv runs: an environment that never ends an episode itself (`done`) while the
model calls its tools is a finding whose next step gives the episodes more turns."""

from __future__ import annotations

from test_diagnosis import ENV, by_code, facts, rows

from rl_mcp.diagnosis.rules import diagnose
from tinker_atropos.openenv import EPISODE_DONE

OPENENV = {**ENV, "max_agent_turns": 3, "openenv_folder": "/envs/word_reverse"}


def test_an_environment_that_never_says_done_is_found_with_more_turns_as_the_way_out() -> None:
    never = rows(4, agent_tool_calls_mean=1.5, reward_mean=0.0, env_metrics={EPISODE_DONE: 0.0})
    found = by_code(diagnose(facts(never, env=OPENENV)))["openenv_never_done"]
    assert found.next_step.arguments == {"field": "max_agent_turns", "value": 6}
    assert found.evidence[0].summary == "no episode ended by the environment over steps 1-4"

    sometimes = rows(4, agent_tool_calls_mean=1.5, env_metrics=lambda s: {EPISODE_DONE: 0.5 if s == 3 else 0.0})
    assert "openenv_never_done" not in by_code(diagnose(facts(sometimes, env=OPENENV)))
    silent = rows(4, agent_tool_calls_mean=0.0, env_metrics={EPISODE_DONE: 0.0})  # no_tool_calls says why
    assert "openenv_never_done" not in by_code(diagnose(facts(silent, env=OPENENV)))
    young = rows(2, agent_tool_calls_mean=1.5, env_metrics={EPISODE_DONE: 0.0})
    assert "openenv_never_done" not in by_code(diagnose(facts(young, env=OPENENV)))
