"""The diagnosis of OpenEnv runs: an environment that never ends an episode itself (`done`) while the
model calls its tools is a finding whose next step gives the episodes more turns; a model that never
acts is offered its action in plain text, or a supervised stage from a file or a teacher, never the
demonstrations an OpenEnv environment does not have."""

from __future__ import annotations

from test_diagnosis import ENV, by_code, facts, rows

from rl_mcp.diagnosis.findings import NextStep
from rl_mcp.diagnosis.rules import diagnose
from tinker_atropos.openenv import EPISODE_DONE

# as a run's config has them: every field, the unset ones null
OPENENV = {
    **ENV,
    "max_agent_turns": 3,
    "openenv_folder": "/envs/word_reverse",
    "action_mode": None,
    "sft": None,
    "demonstrations_per_group": 0,
    "system_prompt": "You act in an environment through its tools.",
}


def never_acting(action_mode: str | None) -> NextStep:
    """no_tool_calls' next step on an OpenEnv run of `action_mode` whose model made no call in two steps."""
    silent = rows(2, agent_tool_calls_mean=0.0, reward_mean=0.0, env_metrics={EPISODE_DONE: 0.0})
    return by_code(diagnose(facts(silent, env={**OPENENV, "action_mode": action_mode})))["no_tool_calls"].next_step


def test_a_model_that_never_acts_is_offered_its_action_in_plain_text_else_a_file_or_a_teacher() -> None:
    """A tool by choice: the action in words first (a start refuses it where the action does not fit);
    left to the environment (null), which chose the tool: its action does not fit text."""
    text = never_acting("tool")
    assert text.arguments == {"field": "action_mode", "value": "text"} and "plain reply is the action" in text.why
    stage = never_acting(None)
    assert stage.arguments["field"] == "sft" and stage.arguments["value"]["sources"] == ["file"]
    assert "teacher" in stage.why and "no demonstrations" in stage.why
    assert "demonstrations" not in str(stage.arguments)


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
