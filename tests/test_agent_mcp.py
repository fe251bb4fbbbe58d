"""Agent (multi-turn tool-calling) environments through the ten MCP tools: found, configured,
tested against the local inference server, and trained to completion by real processes, with the
agent metrics in metrics.jsonl and rl_check_status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from test_runs_mcp import call, environ, serving, wait_status

from tinker_atropos.agent.sandboxes.bwrap import probe

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# tiny-chat spends a token per character: room for the calculator's tool prompt and two short turns.
AGENT_EDITS = {
    "max_token_length": 1024,
    "max_turn_tokens": 24,
    "max_agent_turns": 2,
    "group_size": 2,
    "batch_size": 4,
    "total_steps": 5,
    "eval_size": 2,
    # the random tiny model earns equal (zero) scores: keep those groups so the steps still run
    "ensure_scores_are_not_same": False,
}


async def test_agent_environments_are_listed_and_configured(rl_home: Path) -> None:
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        listed = await call(client, "rl_list_environments")
        names = {e["name"] for e in listed["environments"]}
        assert {"tool_calculator", "terminal_files"} <= names  # subclasses of HermesAgentBaseEnv
        assert "HermesAgentBaseEnv" not in {e["class_name"] for e in listed["environments"]}
        selected = await call(client, "rl_select_environment", name="terminal_files")
        fields = {f["name"]: f for f in selected["config"]["fields"]}
        for name in ("enabled_toolsets", "max_agent_turns", "terminal_backend", "terminal_timeout", "tool_call_parser"):
            assert name in fields, name
        bad = await client.call_tool("rl_edit_config", {"field": "max_agent_turns", "value": "many"})
        assert bad.is_error


async def test_agent_environment_is_tested_and_trained_through_the_tools(rl_home: Path) -> None:
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="tool_calculator")
        for field, value in AGENT_EDITS.items():
            await call(client, "rl_edit_config", field=field, value=value)

        tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=600)
        model: dict[str, Any] = tested["results"][0]
        assert model["status"] == "ok", (model["error"], model["log_tail"])
        assert model["turns_per_rollout"] is not None and 1 <= model["turns_per_rollout"] <= 2
        assert model["tool_calls_per_rollout"] is not None and model["tool_errors"] is not None
        assert model["sample_trajectory"].startswith("[") and "[USER]" in model["sample_trajectory"]
        assert "calculator" in model["sample_trajectory"] or "What is" in model["sample_trajectory"]
        if probe() is None:  # bwrap runs here: the tools are sandboxed and nothing is to be said
            assert model["warnings"] == []

        started = await call(client, "rl_start_training", wait=True)
        assert started["status"] == "running", started
        done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped", "lost"}, 900)
        assert done["status"] == "completed", (done["error"], done["failure_log_tail"])
        assert done["latest"]["agent_turns_mean"] is not None and done["latest"]["agent_tool_errors"] is not None

    lines = [json.loads(x) for x in (Path(started["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3, 4, 5]
    # each group's demonstration outscores the random model's replies: every step trains
    assert all(m["loss"] is not None and m["loss"] != 0.0 for m in lines), [m["loss"] for m in lines]
    for m in lines:
        assert 1 <= m["agent_turns_mean"] <= 2 and m["agent_tool_calls_mean"] >= 0 and m["agent_tool_errors"] >= 0
    # the base model's eval before the first rollout: accuracy and the share that called a tool
    held = [json.loads(x) for x in (Path(started["run_dir"]) / "eval.jsonl").read_text().splitlines()]
    before = held[0]
    assert before["step"] == 0 and before["num_items"] == 2 and 0.0 <= before["eval_tool_call_share"] <= 1.0
    # its validation set (drawn from the training problems) every steps_per_eval steps; the held-out set
    # before the first step and on the final weights
    validation = [json.loads(x) for x in (Path(started["run_dir"]) / "validation.jsonl").read_text().splitlines()]
    assert validation[0]["step"] == 0 and validation[-1]["final"] and validation[-1]["step"] == 5, validation
    assert any(e["final"] and e["step"] == 5 and not e.get("checkpoint") for e in held), held


async def test_tools_unsandboxed_for_want_of_bwrap_say_so_in_the_answer(rl_home: Path) -> None:
    """terminal_backend auto falls back to local where bwrap cannot run (here: a bwrap that fails),
    and rl_test_inference's answer says so, with what is missing and how to enable it."""
    async with serving(environ(rl_home, RL_MCP_BWRAP="/bin/false")) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="tool_calculator")
        for field, value in AGENT_EDITS.items():
            await call(client, "rl_edit_config", field=field, value=value)
        tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=600)
    model = tested["results"][0]
    assert model["status"] == "ok", (model["error"], model["log_tail"])
    assert len(model["warnings"]) == 1, model["warnings"]
    warning = model["warnings"][0]
    assert "terminal_backend auto: using local, which does NOT isolate" in warning
    assert "bwrap failed here (exit 1)" in warning and "kernel.unprivileged_userns_clone=1" in warning
