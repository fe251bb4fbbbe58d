"""No silent waits, with real processes on the local profile's tiny model (a 4096-token context).

An environment that discards every group (its `score()` returns None when the scores are all
equal, as Atropos' text_reversal and gsm8k do) is reported with sample replies and scores, by
rl_test_inference within its limit and by a run's rl_check_status before the run fails with it.
A reply that runs to its cap or to the context is flagged with the field that caps it; a long
reply shows progress (tokens generated so far) while rl_test_inference waits; a run shows the
requests that outlive their timeout and the field to change; rl_get_current_config states the
per-turn cap where the environment asks for more than the model's context.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client

from rl_mcp.app import open_app
from rl_mcp.inference.progress import WAITING_REPORT_S
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import PROFILES_DIR, Settings
from tinker_atropos.models import ensure_model

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ENV_DIR = Path(__file__).resolve().parent / "byo_envs" / "stalls"
RUN = {"total_steps": 2, "batch_size": 8, "steps_per_eval": 100}


async def call(client: Client, tool: str, progress: list | None = None, **args: Any) -> dict[str, Any]:
    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        assert progress is not None
        progress.append((value, total, message or ""))

    result = await client.call_tool(tool, args, progress_callback=on_progress if progress is not None else None)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content or {}


async def select(client: Client, env_name: str, **edits: Any) -> None:
    await call(client, "rl_select_environment", name=env_name)
    for field, value in edits.items():
        await call(client, "rl_edit_config", field=field, value=value)


async def run_until(settings: Settings, key: str, **edits: Any) -> dict[str, Any]:
    """Start a long_replies run, check its status until `environment_requests[key]` shows, stop it."""
    async with open_app(settings) as app, Client(build_server(app)) as client:
        await select(client, "long_replies", **RUN, **edits)
        run_id = (await call(client, "rl_start_training"))["run_id"]
        with anyio.fail_after(180):
            while not (
                (status := await call(client, "rl_check_status", run_id=run_id))["environment_requests"] or {}
            ).get(key):
                assert status["status"] in ("starting", "running"), status
                await anyio.sleep(0.5)
        await call(client, "rl_stop_training", run_id=run_id)
    return status


def settings_with(monkeypatch: pytest.MonkeyPatch, profile: str = "local", **env: str) -> Settings:
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(ENV_DIR))
    monkeypatch.setenv("RL_MCP_STATUS_MIN_INTERVAL", "0")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings.from_env(profile=profile, stop_runs_on_exit=True)


async def test_rl_test_inference_says_the_environment_discarded_every_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stopped after RL_MCP_ENV_DISCARD_GROUPS in a row, not at the call's limit: with the replies,
    the scores the environment gave them, and the likely cause."""
    settings = settings_with(monkeypatch, RL_MCP_ENV_DISCARD_GROUPS="3")
    async with open_app(settings) as app, Client(build_server(app)) as client:
        await select(client, "equal_scores")
        started = time.monotonic()
        answer = await call(client, "rl_test_inference", num_steps=1, group_size=4, timeout_s=600)
    (model,) = answer["results"]
    assert model["status"] == "discarded" and time.monotonic() - started < 300, model  # not the call's 600 s
    discarded = model["discarded"]
    assert discarded["in_a_row"] >= 3 and discarded["groups_scored"] == 0
    assert discarded["scores"] == [0.0, 0.0, 0.0, 0.0]
    assert len(discarded["sample_replies"]) == 4
    assert discarded["likely_cause"] == "equal scores"
    assert "discarded every group" in model["error"] and "every reply scored 0" in model["error"]
    assert not answer["environment_working"] and "discarded every group" in answer["next_step"]


async def test_a_run_whose_environment_discards_every_group_shows_it_then_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    timeout_s = 10
    settings = settings_with(monkeypatch, RL_MCP_ENV_DISCARD_TIMEOUT=str(timeout_s), RL_MCP_ENV_DISCARD_GROUPS="5")
    async with open_app(settings) as app, Client(build_server(app)) as client:
        await select(client, "equal_scores", **RUN)
        run_id = (await call(client, "rl_start_training"))["run_id"]
        finding = None
        with anyio.fail_after(240):
            while (status := await call(client, "rl_check_status", run_id=run_id))["status"] != "failed":
                assert status["status"] in ("starting", "running", "stopping"), status
                found = {f["code"]: f for f in status["findings"]}
                if finding is None and "groups_discarded" in found:
                    finding = found["groups_discarded"]
                    assert status["next_step"].startswith("Training is under way, but: The environment discarded")
                await anyio.sleep(0.5)
    assert finding is not None, "the finding came before the run failed"
    assert finding["severity"] == "error" and "likely equal scores" in finding["title"]
    assert "every reply scored 0" in finding["evidence"][0]["summary"]
    assert (
        finding["next_step"]["tool"] == "rl_edit_config" and finding["next_step"]["arguments"]["field"] == "group_size"
    )
    error = status["error"]
    # each reply as repr() quotes it: in '' or, when it holds a ', in ""
    assert error.startswith("the environment discarded every group for") and "sample replies: " in error, error
    assert all(p["state"] == "exited" for p in status["processes"]), status["processes"]


async def test_a_long_reply_shows_progress_and_its_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment asks 100000 tokens a reply, more than the 4096-token context: the server caps
    each at max_reply_tokens, rl_get_current_config says so, and the test reports the tokens the
    server generated while it waits, then flags the cut replies with the field. Scoring takes longer
    than a waiting report's period: on a fast machine the replies alone came before the first one."""
    settings = settings_with(monkeypatch)
    # the cap is stated from the model's folder (its context): built here, not by whichever test came first
    await anyio.to_thread.run_sync(ensure_model, "tiny-chat")
    async with open_app(settings) as app, Client(build_server(app)) as client:
        edits = {"max_token_length": 100_000, "max_reply_tokens": 1500, "score_delay_s": WAITING_REPORT_S + 1.5}
        await select(client, "long_replies", **edits)
        config = await call(client, "rl_get_current_config")
        progress: list = []
        answer = await call(client, "rl_test_inference", progress, num_steps=1, group_size=2, timeout_s=300)
    assert "max_token_length = 100000" in config["generation_cap"] and "4096-token context" in config["generation_cap"]
    assert "max_reply_tokens = 1500" in config["generation_cap"]
    (model,) = answer["results"]
    assert model["status"] == "ok", model
    cap = model["replies_at_cap"]
    assert (cap["replies_at_cap"], cap["replies"], cap["cut_by"], cap["field"]) == (
        2,
        2,
        "max_reply_tokens",
        "max_reply_tokens",
    )
    counts = [re.search(r"([\d,]+) tokens generated so far", m) for _, _, m in progress]
    tokens = [int(c.group(1).replace(",", "")) for c in counts if c]
    assert tokens and max(tokens) > 0, progress
    values = [v for v, _, _ in progress]
    assert values == sorted(set(values)) and values[-1] == 1.0, "each progress value is larger than the one before"


async def test_a_reply_cut_by_the_context_or_the_environments_own_cap_is_flagged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = settings_with(monkeypatch)
    async with open_app(settings) as app, Client(build_server(app)) as client:
        await select(client, "long_replies", max_token_length=100_000, prompt_words=800)  # ~4000 prompt tokens
        by_context = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300)
        await select(client, "long_replies", max_token_length=8)
        by_env = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300)
    cap = by_context["results"][0]["replies_at_cap"]
    assert (cap["cut_by"], cap["field"]) == ("context", None) and "4096-token context" in cap["summary"], cap
    cap = by_env["results"][0]["replies_at_cap"]
    assert (cap["cut_by"], cap["field"]) == ("max_token_length", "max_token_length"), cap


async def until_done(client: Client, run_id: str, seen: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The run's last status; `seen`: each finding code's first sighting while it ran."""
    with anyio.fail_after(300):
        while (status := await call(client, "rl_check_status", run_id=run_id))["status"] not in ("completed", "failed"):
            for finding in status["findings"]:
                seen.setdefault(finding["code"], {**finding, "environment_requests": status["environment_requests"]})
            await anyio.sleep(0.5)
    return status


async def test_requests_that_outlive_a_binding_timeout_get_a_derived_one_and_the_run_trains(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A profile whose requests time out after 1 s, and replies of 1000 tokens (the tiny model's greedy
    replies never stop; 4.4 ms a decode step at 4 rows here, so 4 s, and over 1 s on a machine three
    times as fast), a group of 4 at a time: every first try times out. With the timeout fixed,
    every retry did too and the run made no step; derived from the server's measured decode step,
    the retries fit and it trains."""
    profile = yaml.safe_load((PROFILES_DIR / "local.yaml").read_text())
    profile["inference"]["timeout"] = 1
    profile["locked"]["trainer"]["max_token_trainer_length"] = 2048  # the long replies are trained
    (tmp_path / "slow.yaml").write_text(yaml.safe_dump(profile))
    settings = settings_with(monkeypatch, profile=str(tmp_path / "slow.yaml"))
    seen: dict[str, dict[str, Any]] = {}
    async with open_app(settings) as app, Client(build_server(app)) as client:
        edits = {"max_token_length": 100_000, "max_reply_tokens": 1000, "group_size": 4, "max_batches_offpolicy": 1}
        await select(client, "long_replies", **{**RUN, "batch_size": 4, **edits})
        started = await call(client, "rl_start_training")
        status = await until_done(client, run_id := started["run_id"], seen)
        results = await call(client, "rl_get_results", run_id=run_id)
    assert status["status"] == "completed", status["error"]
    assert "stalled" not in seen, seen["stalled"]  # the cause is named instead
    first = seen["requests_time_out"]
    summary = first["environment_requests"]["timeouts_summary"]
    assert "outlived the client's 1 s timeout" in summary and "lower max_reply_tokens" in summary, summary
    requests = status["environment_requests"]
    basis = requests["client_timeout_basis"]
    assert requests["client_timeout_s"] > 1 and requests["answered"] >= 2, requests
    assert "ms a decode step at the 4 rows the run schedules (" in basis, basis  # group 4, one at a time
    assert "capped at 1000 by the server" in basis, basis
    assert "at least the environment's 1 s" in basis, basis
    finding = {f["code"]: f for f in results["findings"]}["requests_time_out"]
    assert finding["severity"] == "info" and "outlived their timeout" in finding["title"], finding
    assert "timed out; the timeout now" in finding["evidence"][0]["summary"], finding
    config = yaml.safe_load(Path(started["config_path"]).read_text())
    assert config["request_timeouts"] == {"margin": 2.0, "prefill_s": 10.0, "ceiling_s": 1800.0}


async def test_a_slow_environment_whose_first_groups_tie_trains(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its 8 tied groups take 6 s or more, three times RL_MCP_ENV_DISCARD_TIMEOUT: a run used to end
    there. It ends for discards only after RL_MCP_ENV_DISCARD_GROUPS (20) in a row as well, so it
    shows the discards as a finding, then scores and trains."""
    settings = settings_with(monkeypatch, RL_MCP_ENV_DISCARD_TIMEOUT="2")
    seen: dict[str, dict[str, Any]] = {}
    async with open_app(settings) as app, Client(build_server(app)) as client:
        await select(client, "slow_ties", **RUN)
        run_id = (await call(client, "rl_start_training"))["run_id"]
        status = await until_done(client, run_id, seen)
    assert status["status"] == "completed", status["error"]
    assert "likely equal scores" in seen["groups_discarded"]["title"], seen


async def test_a_run_shows_replies_that_run_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_with(monkeypatch)
    status = await run_until(settings, "replies_at_cap", max_token_length=100_000, max_reply_tokens=16)
    cap = status["environment_requests"]["replies_at_cap"]
    assert (cap["cut_by"], cap["field"]) == ("max_reply_tokens", "max_reply_tokens"), cap
    assert "max_reply_tokens = 16 tokens a reply" in cap["summary"], cap
