"""A new user's first keyless run: empty HOME and caches, a real stdio MCP client, a completed run.

Every other test shares the machine's built models (~/.cache/tinker-atropos), which hides what a
fresh machine hits first: a process loading a model folder nothing has built yet.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
# Everything that could point a process at an already-built model or an existing state dir.
MACHINE_STATE = ("RL_MCP_HOME", "RL_MCP_CACHE", "TINKER_ATROPOS_CACHE", "HF_HOME", "XDG_CACHE_HOME", "RL_MCP_ENV_DIRS")


def fresh_machine_env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in MACHINE_STATE and k != "TINKER_API_KEY"}
    env.update(HOME=str(home), HF_HUB_OFFLINE="1", WANDB_MODE="disabled", **extra)
    return env


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content or {}


async def test_first_keyless_run_from_an_empty_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "rl_mcp", "serve", "--stop-runs-on-exit"],
        env=fresh_machine_env(home, RL_MCP_PROFILE="local", RL_MCP_STATUS_MIN_INTERVAL="0"),
        cwd=str(ROOT),
    )
    with (tmp_path / "server.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            await call(client, "rl_select_environment", name="letter_repeat")
            for field, value in {"total_steps": 2, "group_size": 4, "batch_size": 8, "steps_per_eval": 100}.items():
                await call(client, "rl_edit_config", field=field, value=value)
            started = await call(client, "rl_start_training")
            with anyio.fail_after(300):
                while True:
                    status = await call(client, "rl_check_status", run_id=started["run_id"])
                    if status["status"] not in ("starting", "running", "stopping"):
                        break
                    await anyio.sleep(0.2)
            assert status["status"] == "completed", (status.get("error"), status.get("failure_log_tail"))
            results = await call(client, "rl_get_results", run_id=started["run_id"])
    run_dir = Path(started["run_dir"])
    assert run_dir.is_relative_to(home / ".rl-mcp"), run_dir  # the state dir is the new HOME's
    model = home / ".cache" / "tinker-atropos" / "models" / "tiny-chat"
    assert (model / "config.json").is_file() and (model / "tokenizer_config.json").is_file()
    # the model was built in its own stage, before run-api, trainer and environment started
    assert (run_dir / "logs" / "model.log").read_text().strip().endswith(str(model))
    assert Path(results["final_weights"]).is_dir() and len(results["history"]) == 2


async def test_a_model_that_cannot_be_built_fails_its_stage_fast(tmp_path: Path) -> None:
    """A profile naming SmolLM2 on a machine whose cache cannot be written: stage `model` fails, says why,
    and no process of the run was started."""
    home = tmp_path / "home"
    cache = tmp_path / "cache-file"
    cache.write_text("not a folder")  # TINKER_ATROPOS_CACHE is a file: nothing can be built under it
    env = fresh_machine_env(home, RL_MCP_PROFILE="smollm2", TINKER_ATROPOS_CACHE=str(cache))
    params = StdioServerParameters(command=sys.executable, args=["-m", "rl_mcp", "serve"], env=env, cwd=str(ROOT))
    with (tmp_path / "server.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            await call(client, "rl_select_environment", name="letter_repeat")
            started = await call(client, "rl_start_training")
            with anyio.fail_after(120):
                while (status := await call(client, "rl_check_status", run_id=started["run_id"]))["status"] in (
                    "starting",
                    "stopping",
                ):
                    await anyio.sleep(0.2)
    assert status["status"] == "failed" and status["stage"] == "model", status
    assert "building the offline model 'smollm2-135m' failed" in status["error"], status["error"]
    assert status["failure_log_tail"], status
    assert status["processes"] == [], status["processes"]  # nothing started on a model that is not there
