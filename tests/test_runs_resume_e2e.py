"""Resume and fork through a real MCP client, on the local profile, with real processes.

A: 8 steps, stopped at step >= 3 -> B = resume(A): completes at 8, metrics 1..8 once each, the
   optimizer state carried over (checked in the saved optimizer), the data position going on,
   the parent's config (a session edit made meanwhile does not leak in);
C = fork(A, checkpoint_step=2) with a lower learning rate: first step 3; its trainer killed -9
   after its state at step 4 -> D = resume(C): completes at C's 24.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest
import torch
import yaml
from mcp import Client

from rl_mcp.app import open_app
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import Settings
from tinker_atropos.run_files import RunFiles, read_jsonl

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOTAL = 8
C_TOTAL = 3 * TOTAL  # the fork that is killed mid-run
SMALL = {"total_steps": TOTAL, "group_size": 4, "batch_size": 8, "save_state_every": 2}


async def results_of(client: Client, run_id: str) -> dict[str, Any]:
    return await call(client, "rl_get_results", run_id=run_id)


def environ(home: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "RL_MCP_HOME": str(home),
        "RL_MCP_PROFILE": "local",
        "RL_MCP_STATUS_MIN_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
    }
    env.pop("TINKER_API_KEY", None)
    return env


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content or {}


async def refused(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, result.structured_content
    return result.content[0].text  # type: ignore[union-attr]


async def wait_for(client: Client, run_id: str, done: Any, timeout: float) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            status = await call(client, "rl_check_status", run_id=run_id)
            if done(status):
                return status
            assert status["status"] in ("starting", "running", "stopping"), status
            await anyio.sleep(0.3)


def ended(status: dict[str, Any]) -> bool:
    return status["status"] in ("completed", "failed", "stopped", "lost")


def steps_of(run: dict[str, Any]) -> list[int]:
    return [int(r["step"]) for r in read_jsonl(RunFiles(Path(run["run_dir"])).metrics)]


def optimizer_steps(folder: Path) -> tuple[int, set[int]]:
    """The local backend's optimizer.pt: its step count and Adam's per-parameter step counters."""
    state = torch.load(folder / "optimizer.pt", weights_only=True)
    return int(state["steps"]), {int(s["step"]) for s in state["optimizer"]["state"].values()}


def trained_steps(run: dict[str, Any]) -> int:
    """Steps that ran an optimizer step (a step whose groups all had zero advantage runs none)."""
    return sum(1 for r in read_jsonl(RunFiles(Path(run["run_dir"])).metrics) if r.get("num_datums"))


async def test_stop_resume_fork_kill_resume(tmp_path: Path) -> None:
    async with open_app(Settings.from_env(environ(tmp_path / "home"), stop_runs_on_exit=True)) as app:
        async with Client(build_server(app)) as client:
            await call(client, "rl_select_environment", name="letter_repeat")
            for field, value in SMALL.items():
                await call(client, "rl_edit_config", field=field, value=value)

            # --- A: stopped at step >= 3 of 8 -----------------------------------------------------
            a = await call(client, "rl_start_training")
            await wait_for(client, a["run_id"], lambda s: s["step"] >= 3, timeout=240)
            assert "still running" in await refused(client, "rl_start_training", resume_from=a["run_id"])
            stopped = await call(client, "rl_stop_training", run_id=a["run_id"])
            assert stopped["status"] == "stopped"
            a_results = await call(client, "rl_get_results", run_id=a["run_id"])
            a_states = [s["step"] for s in a_results["training_states"]]
            a_last = a_results["steps_completed"]
            assert 3 <= a_last < TOTAL and a_states[0] == 2 and a_states[-1] == a_last, a_results
            assert "no training state at step 1" in await refused(
                client, "rl_start_training", resume_from=a["run_id"], checkpoint_step=1
            )
            a_opt, a_adam = optimizer_steps(Path(a_results["final_state"]))
            assert a_opt == trained_steps(a) > 0 and a_adam == {a_opt}

            # --- B = resume(A): the parent's config, steps a_last+1..8, optimizer carried over -----
            await call(client, "rl_edit_config", field="learning_rate", value=5e-4)  # must not leak into B
            b = await call(client, "rl_start_training", resume_from=a["run_id"])
            assert b["resumed_from"] == {"parent_run_id": a["run_id"], "step": a_last, "kind": "resume"}
            b_cfg = yaml.safe_load(Path(b["config_path"]).read_text())["trainer"]
            a_cfg = yaml.safe_load(Path(a["config_path"]).read_text())["trainer"]
            assert (b_cfg["learning_rate"], b_cfg["start_step"], b_cfg["run_name"]) == (1e-3, a_last, a_cfg["run_name"])
            b_done = await wait_for(client, b["run_id"], ended, 240)
            assert b_done["status"] == "completed", b_done
            assert steps_of(b) == list(range(1, TOTAL + 1))  # every step once: the parent's, then its own
            b_results = await call(client, "rl_get_results", run_id=b["run_id"])
            assert [p["step"] for p in b_results["history"]] == list(range(1, TOTAL + 1))
            assert b_results["resumed_from"]["parent_run_id"] == a["run_id"]
            b_opt, b_adam = optimizer_steps(Path(b_results["final_state"]))
            # every optimizer step of 1..8 is in its Adam state: A's a_opt were loaded, not started afresh
            assert b_opt == trained_steps(b) and b_adam == {b_opt}
            # the environment went on from the parent's data position, not from the first items
            b_env_name = yaml.safe_load(Path(b["config_path"]).read_text())["env"]["wandb_name"]
            b_env = RunFiles(Path(b["run_dir"])).env_positions_dir(b_env_name)
            cursors = {
                int(p.stem.split("-")[1]): yaml.safe_load(p.read_text())["_draw_state"]["draws"]
                for p in b_env.glob("step-*.json")
            }
            assert cursors[a_last] > 0, cursors
            assert f"data position: draw {cursors[a_last]} at step {a_last}" in Path(b["logs"]["env"]).read_text()
            assert all(v > cursors[a_last] for k, v in cursors.items() if k > a_last), cursors
            listed = {r["run_id"]: r for r in (await call(client, "rl_list_runs"))["runs"]}
            assert listed[b["run_id"]]["resumed_from"]["step"] == a_last and listed[a["run_id"]]["resumed_from"] is None

            # --- C = fork(A at step 2) with the session's lower learning rate; killed -9 --------------
            # C is longer than A: with a batched inference server a step takes well under a second, and a
            # run of 8 could end between its state at step 4 appearing and the kill below
            c = await call(
                client, "rl_start_training", resume_from=a["run_id"], checkpoint_step=2, fork=True, total_steps=C_TOTAL
            )
            assert c["resumed_from"] == {"parent_run_id": a["run_id"], "step": 2, "kind": "fork"}
            c_cfg = yaml.safe_load(Path(c["config_path"]).read_text())["trainer"]
            assert (c_cfg["learning_rate"], c_cfg["start_step"]) == (5e-4, 2)
            await wait_for(client, c["run_id"], lambda s: s["step"] >= 3, timeout=240)
            assert steps_of(c)[:3] == [1, 2, 3]  # its first own step is the checkpoint's + 1
            with anyio.fail_after(120):  # a state at step 4 or later: a fast run may have pruned step 4's by now
                while not any(s["step"] >= 4 for s in (await results_of(client, c["run_id"]))["training_states"]):
                    await anyio.sleep(0.3)
            trainer_pid = next(
                p["pid"]
                for p in (await call(client, "rl_check_status", run_id=c["run_id"]))["processes"]
                if p["name"] == "trainer"
            )
            os.killpg(trainer_pid, signal.SIGKILL)
            c_failed = await wait_for(client, c["run_id"], ended, 30)
            assert c_failed["status"] == "failed" and "-9" in c_failed["error"]

            # --- D = resume(C): completes at C's total with C's config -----------------------------------
            d = await call(client, "rl_start_training", resume_from=c["run_id"])
            d_step = d["resumed_from"]["step"]
            assert 4 <= d_step < C_TOTAL
            d_done = await wait_for(client, d["run_id"], ended, 240)
            assert d_done["status"] == "completed", d_done
            assert steps_of(d) == list(range(1, C_TOTAL + 1))
            assert yaml.safe_load(Path(d["config_path"]).read_text())["trainer"]["learning_rate"] == 5e-4
            assert steps_of(a) == list(range(1, a_last + 1))  # the parent is untouched
