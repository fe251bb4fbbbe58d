"""An environment that raises is reported, not waited on forever: its latest exception (type,
message, where) in rl_check_status within seconds, and a run whose environment only raises fails
with it after RL_MCP_ENV_ERROR_TIMEOUT, its processes stopped; one that raises for some items goes on."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from rl_mcp.app import open_app
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import Settings

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ENV_DIR = Path(__file__).resolve().parent / "byo_envs" / "raising"
TIMEOUT_S = 8
SMALL = {"total_steps": 2, "group_size": 4, "batch_size": 8, "steps_per_eval": 100, "eval_size": 0}


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content or {}


async def start(client: Client, env_name: str) -> str:
    await call(client, "rl_select_environment", name=env_name)
    for field, value in SMALL.items():
        await call(client, "rl_edit_config", field=field, value=value)
    return str((await call(client, "rl_start_training"))["run_id"])


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(ENV_DIR))
    monkeypatch.setenv("RL_MCP_ENV_ERROR_TIMEOUT", str(TIMEOUT_S))
    monkeypatch.setenv("RL_MCP_STATUS_MIN_INTERVAL", "0")
    return Settings.from_env(profile="local", stop_runs_on_exit=True)


async def test_an_environment_that_always_raises_fails_the_run_with_its_exception(settings: Settings) -> None:
    async with open_app(settings) as app, Client(build_server(app)) as client:
        run_id = await start(client, "always_raises")
        first_seen = running_at = None
        with anyio.fail_after(180):
            while (status := await call(client, "rl_check_status", run_id=run_id))["status"] != "failed":
                assert status["status"] in ("starting", "running", "stopping"), status
                if status["status"] == "running" and running_at is None:
                    running_at = time.monotonic()
                if status["environment_error"] and first_seen is None:
                    first_seen = time.monotonic()
                    seen = status["environment_error"]
                    assert "rl_test_inference" in status["next_step"] and "KeyError" in status["next_step"]
                await anyio.sleep(0.25)
    assert running_at is not None and first_seen is not None
    assert first_seen - running_at < 5, "the exception reached rl_check_status within seconds"
    assert (seen["type"], seen["message"]) == ("KeyError", "'answer'")
    assert seen["where"].startswith("always_raises.py:") and seen["where"].endswith("in score_from")
    assert seen["groups_scored"] == 0 and seen["errors"] >= 1
    error = status["error"]
    assert f"no group for {TIMEOUT_S} s" in error and "KeyError: 'answer' (at always_raises.py:" in error, error
    assert all(p["state"] == "exited" for p in status["processes"]), status["processes"]
    assert status["failure_log_tail"], status  # the environment's log, where atroposlib logged each one


async def test_an_environment_that_raises_for_some_items_goes_on(settings: Settings) -> None:
    async with open_app(settings) as app, Client(build_server(app)) as client:
        run_id = await start(client, "sometimes_raises")
        with anyio.fail_after(240):
            while (status := await call(client, "rl_check_status", run_id=run_id))["status"] in (
                "starting",
                "running",
                "stopping",
            ):
                await anyio.sleep(0.5)
    assert status["status"] == "completed", status["error"]
    seen = status["environment_error"]
    assert seen["type"] == "ValueError" and seen["message"].endswith("has no answer")
    assert seen["groups_scored"] >= 2 and seen["where"].startswith("sometimes_raises.py:")


async def test_rl_test_inference_stops_an_environment_that_only_raises(settings: Settings) -> None:
    """atroposlib would retry until the call's timeout; the test ends once nothing but exceptions come."""
    async with open_app(settings) as app, Client(build_server(app)) as client:
        await call(client, "rl_select_environment", name="always_raises")
        started = time.monotonic()
        answer = await call(client, "rl_test_inference", num_steps=1, group_size=4, timeout_s=240)
    (model,) = answer["results"]
    assert model["status"] == "failed" and time.monotonic() - started < 120
    assert "KeyError: 'answer' (at always_raises.py:" in model["error"], model["error"]
