"""The supervised stage through the MCP tools: the `sft` section edited like any field, a run that
trains it before RL on the same adapter (progress in rl_check_status, the evaluations before and
after in rl_get_results) after a stop in the middle of it, a fork from its end, a run that ends
with it, and a stop during the stage's evaluation (its requests shown as RL's are) that ends the run
at once."""

from __future__ import annotations

import json
import time
from pathlib import Path

import anyio
import psutil
import pytest
import yaml
from mcp import Client
from test_agent_mcp import AGENT_EDITS
from test_runs_mcp import alive, call, environ, serving, wait_status

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


async def stage_only_run(client: Client) -> dict:
    """A run of tool_calculator that is its supervised stage alone (one step), to its end: its start."""
    await call(client, "rl_select_environment", name="tool_calculator")
    for field, value in {**EDITS, "sft": {**SFT, "max_steps": 1, "then": "stop"}}.items():
        await call(client, "rl_edit_config", field=field, value=value)
    started = await call(client, "rl_start_training")
    done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped", "lost"}, 900)
    assert done["status"] == "completed", (done["error"], done["failure_log_tail"])
    assert done["processes"] == []
    return started


async def test_a_run_whose_stage_is_all_of_it_ends_with_the_stage(rl_home: Path) -> None:
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        started = await stage_only_run(client)
        results = await call(client, "rl_get_results", run_id=started["run_id"])
        exported = await call(client, "rl_export_model", run_id=started["run_id"], format="adapter")
    files = RunFiles(Path(started["run_dir"]))
    stage = json.loads(files.sft_result.read_text())
    assert exported["check"]["matches"] >= exported["check"]["required"] >= 1, exported  # the stage's adapter
    assert results["final_weights"] == stage["sampler_weights"] and results["final_weights_exists"]
    assert not files.metrics.exists()


async def wait_sft_step(client: Client, run_id: str, step: int, timeout: float) -> dict:
    with anyio.fail_after(timeout):
        while True:
            status = await call(client, "rl_check_status", run_id=run_id)
            assert status["status"] == "starting", status
            if status["sft"] and status["sft"]["step"] >= step:
                return status
            await anyio.sleep(0.2)


async def test_a_run_stopped_in_its_stage_resumes_there_and_a_fork_starts_rl_from_its_end(rl_home: Path) -> None:
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="tool_calculator")
        long_stage = {**SFT, "epochs": 100, "max_steps": 20}  # ~5 s of steps left after the stop asked at 2
        for field, value in {**EDITS, "sft": long_stage}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        bad = await client.call_tool("rl_edit_config", {"field": "sft", "value": {"sources": ["file"]}})
        assert bad.is_error and "file" in str(bad.content)  # refused at the edit: source 'file' needs its path
        a = await call(client, "rl_start_training")
        await wait_sft_step(client, a["run_id"], 2, 600)
        stopped = await call(client, "rl_stop_training", run_id=a["run_id"])
        assert stopped["status"] == "stopped", stopped
        a_files = RunFiles(Path(a["run_dir"]))
        a_stage = json.loads(a_files.sft_result.read_text())
        assert a_stage["ended"] == "stopped" and 2 <= a_stage["steps"] < 20

        b = await call(client, "rl_start_training", resume_from=a["run_id"], total_steps=2)
        assert b["resumed_from"]["parent_run_id"] == a["run_id"], b
        b_done = await wait_status(client, b["run_id"], {"completed", "failed", "stopped", "lost"}, 900)
        assert b_done["status"] == "completed", (b_done["error"], b_done["failure_log_tail"])
        assert b_done["sft"]["step"] == 20 and b_done["sft"]["ended"] == "budget"
        b_files = RunFiles(Path(b["run_dir"]))
        assert [s["step"] for s in read_jsonl(b_files.sft_steps)] == list(range(1, 21))  # once each, in order
        assert [e["sft_step"] for e in b_done["sft"]["evals"]] == [0, 20]  # before (the parent's), after
        assert "going on with the stopped stage after step" in b_files.log("sft").read_text()
        assert b_done["sft"]["counts"] == {"demonstrations": {"kept": 4, "refused": 0}} and b_done["sft"]["loss"] > 0
        assert (await call(client, "rl_get_results", run_id=b["run_id"]))["sft"] == b_done["sft"]
        assert [m["step"] for m in read_jsonl(b_files.metrics)] == [1, 2]  # RL on the same adapter, after it
        assert "starting from the supervised stage's state" in b_files.log("trainer").read_text()
        # before the stage, after it (which RL starts from: no second step-0 evaluation), then RL's own
        b_evals = read_jsonl(b_files.evals)
        assert [(e.get("stage"), e["step"]) for e in b_evals][:2] == [("sft", 0), ("sft", 0)]
        assert all(e.get("stage") is None for e in b_evals[2:])

        await call(client, "rl_edit_config", field="learning_rate", value=1e-4)  # other RL settings
        c = await call(client, "rl_start_training", resume_from=b["run_id"], checkpoint_step=0, fork=True)
        c_done = await wait_status(client, c["run_id"], {"completed", "failed", "stopped", "lost"}, 900)
        assert c_done["status"] == "completed", (c_done["error"], c_done["failure_log_tail"])
    c_files = RunFiles(Path(c["run_dir"]))
    assert not c_files.log("sft").exists()  # the stage is not trained again
    sft_state = json.loads(b_files.sft_result.read_text())["state"]
    assert yaml.safe_load(c_files.config.read_text())["trainer"]["resume_from"] == sft_state
    assert [m["step"] for m in read_jsonl(c_files.metrics)] == [1, 2]


def stage_tree(config_path: str) -> list[psutil.Process]:
    """The stage's process of the run with this config, and its descendants."""
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "tinker_atropos.sft.stage" in cmdline and config_path in cmdline:
            return [proc, *proc.children(recursive=True)]
    return []


async def test_a_stop_during_the_stages_evaluation_ends_the_run_at_once(rl_home: Path) -> None:
    """The evaluation before the stage's first step asks replies of ~3000 tokens (the tiny model's greedy
    replies never stop): seconds each. While it runs the status shows its requests with the timeout
    fitted to them; a stop then cancels it, the stage saves and exits, and nothing of it is left (it used
    to finish the evaluation first, and was killed after the server's 60 s grace)."""
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="tool_calculator")
        for field, value in {**EDITS, "max_token_length": 4096, "max_turn_tokens": 3000, "sft": SFT}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        started = await call(client, "rl_start_training")
        with anyio.fail_after(300):
            while True:
                status = await call(client, "rl_check_status", run_id=started["run_id"])
                if (status["environment_requests"] or {}).get("in_flight"):
                    break
                assert status["status"] == "starting", status
                await anyio.sleep(0.1)
        assert status["stage"] == "sft" and status["sft"]["step"] == 0, status
        basis = status["environment_requests"]["client_timeout_basis"]
        assert "ms a decode step at the" in basis, basis  # fitted to the server's measured speed
        stage = stage_tree(started["config_path"])
        assert stage, "the stage's process"
        clock = time.monotonic()
        stopped = await call(client, "rl_stop_training", run_id=started["run_id"])
        took = time.monotonic() - clock
    assert stopped["status"] == "stopped" and took < 10, (stopped, took)
    assert not alive(stage), alive(stage)
    files = RunFiles(Path(started["run_dir"]))
    assert json.loads(files.sft_result.read_text())["ended"] == "stopped"  # saved by the stage, not killed
    assert not [e for e in read_jsonl(files.evals) if e.get("stage") == "sft"]  # the evaluation was cut short
