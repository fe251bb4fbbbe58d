"""A Hermes environment runs with its import lines changed and nothing else.

tests/byo_envs/hermes/notes_env.py is written against hermes-agent (its modules, HermesAgentLoop
with Hermes' keywords, ToolContext(task_id), cleanup, budget_config, tool_pool_size). The test
ports it with the module table of docs/agentic-environments.md, checks that only import lines
changed, then runs its rollouts and its own evaluate() against the real inference server."""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
from pathlib import Path

import pytest
from agent_helpers import close_env, make_env
from hermes_port import ORIGINAL, port

from tinker_atropos.agent import task_sandboxes
from tinker_atropos.environments.tool_calculator import ToolCalculatorEnv


def _call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


@pytest.fixture
def ported(tmp_path: Path):
    original = ORIGINAL.read_text()
    text = port(original)
    changed = [
        line[1:]
        for line in difflib.unified_diff(original.split("\n"), text.split("\n"), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed and all(line.startswith("from ") and " import " in line for line in changed), changed
    path = tmp_path / "notes_env.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("ported_notes_env", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.anyio
async def test_a_hermes_env_ported_by_its_imports_trains_and_evaluates(ported, scripted, tiny_path) -> None:
    url, sampler = scripted
    env = make_env(ported.HermesNotesEnv, url, tiny_path, group_size=2, max_token_length=16384)
    try:
        assert task_sandboxes.settings.tool_slots._value == 8  # tool_pool_size reached the tools
        budget = env.config.build_budget_config()
        assert budget.resolve_threshold("terminal") == 400 and budget.preview_size == 120
        await env.setup()

        # a rollout: the shell writes under ~, the reward's read_file and download_file find it
        item = await env.get_next_item()
        sampler.script = [_call("terminal", command="mkdir -p ~/notes && echo ready > ~/notes/status.txt"), "done"]
        group, _ = await env.collect_trajectories(item)
        assert group["scores"] == [1.0, 1.0]
        assert len(group["inference_logprobs"][0]) == len(group["tokens"][0])

        # /workspace is the same place for the file tools; a large result goes to the sandbox
        item = await env.get_next_item()
        sampler.script = [
            _call("write_file", path="/workspace/seven.txt", content="7\n"),
            _call("terminal", command="seq 1 500"),
            "done",
        ]
        group, _ = await env.collect_trajectories(item)
        assert group["scores"] == [1.0, 1.0]
        saved = group["messages"][0][-2]["content"]
        assert "too large for the context" in saved and "~/.tool-results/" in saved and len(saved) < 400

        # the environment's own evaluate(): its HermesAgentLoop, ToolContext(task_id), cleanup()
        sampler.script = [_call("write_file", path="~/notes/status.txt", content="ready"), "done"]
        await env.evaluate()
        assert env.eval_results == [1.0, 0.0]  # the second task's file was never written
        assert not task_sandboxes._sandboxes  # cleanup() closed every task's sandbox
    finally:
        await close_env(env)


@pytest.mark.anyio
async def test_a_result_over_budget_is_saved_where_the_policy_can_read_it(scripted, tiny_path, tmp_path) -> None:
    from tinker_atropos.agent.loop import HermesAgentLoop
    from tinker_atropos.agent.result_budget import BudgetConfig
    from tinker_atropos.agent.sandboxes import SandboxConfig
    from tinker_atropos.agent.tools import TOOL_SCHEMAS, ToolContext

    url, sampler = scripted
    task_sandboxes.configure(SandboxConfig(root=tmp_path), 4)
    env = make_env(ToolCalculatorEnv, url, tiny_path)
    try:
        sampler.script = [_call("terminal", command="seq 1 300"), _call("read_file", path="~/.tool-results/x"), "ok"]
        async with env.server.managed_server(tokenizer=env.tokenizer) as managed:
            loop = HermesAgentLoop(
                managed,
                [TOOL_SCHEMAS["terminal"], TOOL_SCHEMAS["read_file"]],
                {"terminal", "read_file"},
                max_turns=2,
                task_id="budget",
                max_tokens=16384,
                budget_config=BudgetConfig(default_result_size=200, preview_size=50),
            )
            result = await loop.run([{"role": "user", "content": "count"}])
        preview = result.messages[2]["content"]
        path = re.search(r"(~/\.tool-results/\S+\.txt)", preview).group(1)
        whole = ToolContext("budget").terminal(f"cat {path}")["output"]  # the terminal's JSON result
        assert preview.endswith("First 50 chars:]\n" + whole[:50])
        assert json.loads(whole)["output"].split("\n") == [str(n) for n in range(1, 301)]
        assert result.managed_state["nodes"][-1].tokens == result.trace.tokens  # Hermes reads tokens there
        ToolContext("budget").cleanup()
        assert task_sandboxes.find("budget") is None
    finally:
        await close_env(env)
