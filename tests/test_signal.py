"""Runs whose groups tie, with real processes on the local profile's tiny model: a run whose every
item is solved retires them all and ends as completed with its final weights, named `items_solved`;
a user's environment whose reward never pays is counted by prompt, unchanged, and named as having no
signal, with the split of its ties in the evidence."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from rl_mcp.app import open_app
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import Settings

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ENV_DIR = Path(__file__).resolve().parent / "byo_envs" / "signal"


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content or {}


def settings_with(monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(ENV_DIR))
    monkeypatch.setenv("RL_MCP_STATUS_MIN_INTERVAL", "0")
    return Settings.from_env(profile="local", stop_runs_on_exit=True)


async def start(client: Client, environment: str, **edits: Any) -> str:
    await call(client, "rl_select_environment", name=environment)
    for field, value in {"total_steps": 50, **edits}.items():
        await call(client, "rl_edit_config", field=field, value=value)
    return str((await call(client, "rl_start_training"))["run_id"])


async def test_a_run_whose_items_are_all_solved_retires_them_and_completes(monkeypatch: pytest.MonkeyPatch) -> None:
    async with open_app(settings_with(monkeypatch)) as app, Client(build_server(app)) as client:
        # two groups in flight (8 replies a batch, of groups of 4): from the sixth draw on, 4 groups have
        # tied and each draw begins with a probe; with more in flight every draw could come before them
        run_id = await start(client, "solved_items", item_window=2, max_batches_offpolicy=1)
        with anyio.fail_after(240):
            while (status := await call(client, "rl_check_status", run_id=run_id))["status"] != "completed":
                assert status["status"] in ("starting", "running", "stopping"), status
                await anyio.sleep(0.5)
        results = await call(client, "rl_get_results", run_id=run_id)
    items = results["items"]
    assert items["drawn_by"] == "product" and items["all_retired"], items
    assert (items["items"], items["retired_solved"], items["active"], items["deferred_unsolved"]) == (4, 4, 0, 0)
    assert items["tied_at_top"] == items["groups"] >= 8 and items["tied_token_share"] == 1.0
    assert items["stopped_at_probe"] >= 1  # a group of an item whose last one tied began with 2 replies
    assert results["steps_completed"] < 50 and "retired as solved" in results["reason"]
    assert results["final_weights_exists"], results  # its final weights, saved as at any end
    assert "Completed before total_steps: every training item is retired" in status["next_step"]
    finding = {f["code"]: f for f in results["findings"]}["items_solved"]
    assert finding["title"].startswith("The training items are solved")
    assert "at the top reward" in finding["evidence"][0]["summary"]
    assert finding["next_step"]["tool"] == "rl_stop_training"


async def test_a_users_environment_whose_reward_never_pays_is_counted_and_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with open_app(settings_with(monkeypatch)) as app, Client(build_server(app)) as client:
        run_id = await start(client, "unpaid_items")
        with anyio.fail_after(240):
            while not (
                (items := (status := await call(client, "rl_check_status", run_id=run_id))["items"] or {}).get(
                    "deferred_unsolved"
                )
                == 3
                and "no_reward_signal" in {f["code"] for f in status["findings"]}
            ):
                assert status["status"] in ("starting", "running"), status
                await anyio.sleep(0.5)
        await call(client, "rl_stop_training", run_id=run_id)
    assert items["drawn_by"] == "environment" and items["items"] == 3 and items["retired_solved"] == 0
    assert items["tied_at_zero"] == items["groups"] and items["tied_at_top"] == 0
    finding = {f["code"]: f for f in status["findings"]}["no_reward_signal"]
    assert "ties at zero" in finding["title"], finding
    assert "at zero" in finding["evidence"][0]["summary"] and finding["next_step"]["tool"] == "rl_test_inference"
