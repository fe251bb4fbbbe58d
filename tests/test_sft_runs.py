"""The supervised stage through the MCP tools: the `sft` section edited like any field, a run that
trains it before RL on the same adapter (progress in rl_check_status, the evaluations before and
after in rl_get_results), and a run that ends with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import Client
from test_agent_mcp import AGENT_EDITS
from test_runs_mcp import call, environ, serving, wait_status

from tinker_atropos.run_files import RunFiles, read_jsonl

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# the agent tests' edits, with room for the calculator's whole demonstration (a token a character)
EDITS = {
    **AGENT_EDITS,
    "max_token_length": 2048,
    "total_steps": 2,
    "demonstrations_per_group": 0,  # RL on the policy's own rollouts: the stage did the showing
}
SFT = {"sources": ["demonstrations"], "items": 4, "batch_size": 2, "max_steps": 2, "learning_rate": 1e-3}


async def test_a_run_trains_its_supervised_stage_then_rl_on_the_same_adapter(rl_home: Path) -> None:
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="tool_calculator")
        for field, value in {**EDITS, "sft": SFT}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        bad = await client.call_tool("rl_edit_config", {"field": "sft", "value": {"sources": ["file"]}})
        assert bad.is_error and "file" in str(bad.content)
        started = await call(client, "rl_start_training", wait=True)
        assert started["status"] == "running", json.dumps(started)[:3000]
        done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped", "lost"}, 900)
        assert done["status"] == "completed", (done["error"], done["failure_log_tail"])
        sft = done["sft"]
        assert (sft["step"], sft["total_steps"], sft["ended"]) == (2, 2, "budget")
        assert sft["counts"] == {"demonstrations": {"kept": 4, "refused": 0}} and sft["loss"] > 0
        assert [e["sft_step"] for e in sft["evals"]] == [0, 2]
        results = await call(client, "rl_get_results", run_id=started["run_id"])
    assert results["sft"] == sft and results["steps_completed"] == 2
    files = RunFiles(Path(started["run_dir"]))
    assert [m["step"] for m in read_jsonl(files.metrics)] == [1, 2]
    assert "starting from the supervised stage's state" in files.log("trainer").read_text()
    evals = read_jsonl(files.evals)
    # before the stage, after it (which RL starts from: no second step-0 evaluation), then RL's own
    assert [(e.get("stage"), e["step"]) for e in evals][:2] == [("sft", 0), ("sft", 0)]
    assert all(e.get("stage") is None for e in evals[2:])


async def test_a_run_whose_stage_is_all_of_it_ends_with_the_stage(rl_home: Path) -> None:
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="tool_calculator")
        for field, value in {**EDITS, "sft": {**SFT, "max_steps": 1, "then": "stop"}}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        started = await call(client, "rl_start_training")
        done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped", "lost"}, 900)
        assert done["status"] == "completed", (done["error"], done["failure_log_tail"])
        results = await call(client, "rl_get_results", run_id=started["run_id"])
    files = RunFiles(Path(started["run_dir"]))
    stage = json.loads(files.sft_result.read_text())
    assert results["final_weights"] == stage["sampler_weights"] and results["final_weights_exists"]
    assert not files.metrics.exists() and done["processes"] == []
