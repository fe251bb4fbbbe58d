"""[hermes-parity] in-process: ${VAR} placeholders, one server per state dir, explicit inference
targets and a whole-call timeout, the seed's names and locked values, and the MCP features a
2026-era client uses (completions, the workflow prompt, resource links, cost confirmation by
elicitation), each on both protocol generations. Hermes itself: tests/test_hermes.py."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client
from mcp_types import ElicitResult, PromptReference, ResourceLink, ResourceTemplateReference

from rl_mcp.app import open_app
from rl_mcp.doctor import report
from rl_mcp.inference import runner
from rl_mcp.inference.target import InferenceRequest, InferenceTestError, Target, resolve_target
from rl_mcp.runs.store import RunRecord, RunStore
from rl_mcp.session.run_config import render_run_config
from rl_mcp.settings import Settings, load_profile
from rl_mcp.statelock import StateDirLocked
from tinker_atropos.trainer.metrics import MetricsSink, StepMetrics, seed_wandb_names

ROOT = Path(__file__).resolve().parents[1]
MODES = ["auto", "legacy"]  # the 2026 generation, and the 2025 one (initialize handshake)
FAKE_KEY = "tml-sentinel-never-echoed"


# --- 2. an unexpanded ${NAME} is unset --------------------------------------------------------


def test_an_unexpanded_placeholder_is_unset_warned_once_and_in_doctor(caplog, rl_home: Path) -> None:
    env = {"RL_MCP_HOME": str(rl_home), "TINKER_API_KEY": "${TINKER_API_KEY}", "WANDB_API_KEY": "${env:WANDB_API_KEY}"}
    env["OPENROUTER_API_KEY"] = "${OPENROUTER_API_KEY}x"  # not exactly a placeholder: a value
    with caplog.at_level(logging.WARNING, logger="rl_mcp"):
        first = Settings.from_env(env)
        Settings.from_env(env)
    assert first.profile.name == "smollm2"  # the literal was not taken for a Tinker key
    assert "TINKER_API_KEY" not in first.environ and "WANDB_API_KEY" not in first.environ
    assert first.environ["OPENROUTER_API_KEY"] == "${OPENROUTER_API_KEY}x"
    warnings = [r.getMessage() for r in caplog.records if "placeholder" in r.getMessage()]
    assert sum("TINKER_API_KEY" in w for w in warnings) <= 1  # once per process (maybe earlier in the run)
    lines, _ = report(env)
    tinker = next(line for line in lines if line.startswith("TINKER_API_KEY"))
    assert "not set" in tinker and "unexpanded ${...} placeholder" in tinker
    secret = {**env, "TINKER_API_KEY": FAKE_KEY}
    assert FAKE_KEY not in "\n".join(report(secret)[0])  # a key is reported by name only


# --- 7. one server per state dir --------------------------------------------------------------


@pytest.mark.anyio
async def test_one_app_per_state_dir_in_this_process(rl_home: Path) -> None:
    settings = Settings.from_env(profile="local")
    async with open_app(settings):
        with pytest.raises(StateDirLocked, match="this process"):
            async with open_app(settings):
                pass
        other = Settings.from_env({"RL_MCP_HOME": str(rl_home / "other")}, profile="local")
        async with open_app(other):  # another home is another lock
            pass
    async with open_app(settings):  # released on exit
        pass


def test_a_second_server_on_the_same_home_exits_naming_the_holder(rl_mcp_process) -> None:
    first = rl_mcp_process("--transport", "http", "--port", "0")
    second = subprocess.run(
        [sys.executable, "-m", "rl_mcp", "serve"], input="", capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert second.returncode == 3, second.stderr
    assert f"pid {first.proc.pid}" in second.stderr and "one server per state dir" in second.stderr
    assert first.proc.poll() is None  # the holder goes on


# --- 3 and 5. explicit inference targets, one deadline for the whole call ----------------------


def test_no_silent_local_fallback_on_a_remote_profile() -> None:
    base: dict[str, Any] = {"models": None, "base_url": None, "api_key_env": None, "local_model": "tiny-chat"}
    with pytest.raises(InferenceTestError) as err:
        resolve_target(**base, environ={}, local_default=False)
    for way in ("OPENROUTER_API_KEY", "base_url", "target='local'"):
        assert way in str(err.value)
    assert resolve_target(**base, environ={}, local_default=False, target="local").kind == "local"
    assert resolve_target(**base, environ={}).kind == "local"  # the local profile: as before
    with pytest.raises(InferenceTestError, match="target='openrouter' needs"):
        resolve_target(**base, environ={}, target="openrouter")
    with pytest.raises(InferenceTestError, match="takes no base_url"):
        resolve_target(**{**base, "base_url": "http://h/v1", "models": ["m"]}, environ={}, target="local")
    with pytest.raises(InferenceTestError, match="needs base_url"):
        resolve_target(**base, environ={}, target="base_url")


@pytest.mark.anyio
async def test_timeout_s_bounds_the_whole_call(monkeypatch, tmp_path: Path) -> None:
    deadlines: list[float] = []

    async def fake_model(req, target, model, env, environ, python, ports, tracker, deadline):  # type: ignore[no-untyped-def]
        deadlines.append(deadline)
        await anyio.sleep(0.05)
        return runner.ModelOutcome(model=model, status="ok", seconds=0.05, output_dir=tmp_path, log=tmp_path / "x")

    monkeypatch.setattr(runner, "_test_model", fake_model)
    req = InferenceRequest("e", tmp_path / "e.py", {}, num_steps=1, group_size=1, timeout_s=100, out_dir=tmp_path)
    target = Target("openrouter", tuple(f"m{i}" for i in range(8)), "http://x", None, "openai")
    started = time.monotonic()
    outcomes = await runner.run_inference_test(req, target, environ={})
    assert len(outcomes) == 8 and len(set(deadlines)) == 1  # every model shares one deadline
    assert abs(deadlines[0] - (started + 100)) < 1.0


def test_inference_tool_schema_has_target_and_a_default_under_hermes_limit() -> None:
    from rl_mcp.mcp_api.inference.tools import DEFAULT_TIMEOUT_S

    assert DEFAULT_TIMEOUT_S < 300  # Hermes' default tool timeout


# --- 4. the seed's names and locked values ---------------------------------------------------


def test_wandb_gets_the_seed_names_beside_ours(tmp_path: Path) -> None:
    logged: list[dict[str, Any]] = []

    class FakeRun:
        def log(self, values: dict[str, Any], step: int) -> None:
            logged.append(values)

    sink = MetricsSink(tmp_path)
    sink._wandb = FakeRun()
    metrics = StepMetrics(1, 3, 0.0, 0.5, 0.25, 0.1, None, 0.0, 0.3, 0.01, 8, 8, 100, 1.0, None, learning_rate=4e-5)
    sink.log(metrics, logprobs=(-1.5, -1.25))
    values = logged[0]
    assert values["reward_mean"] == 0.25 and values["reward/mean"] == 0.25  # today's and the seed's
    assert values["train/loss"] == 0.5 and values["train/learning_rate"] == 4e-5
    assert values["logprobs/mean"] == -1.5 and values["logprobs/mean_training"] == -1.25
    assert values["logprobs/diff"] == pytest.approx(-0.25)  # a float64 difference: default rel 1e-6
    assert values["advantages/mean"] == 0.0 and values["advantages/std"] == 0.3
    assert "logprobs/mean" not in seed_wandb_names({"loss": None}, None)  # missing values are left out


@pytest.mark.anyio
async def test_tinker_profile_locks_the_seeds_eval_values(mcp_app, probe_envs) -> None:
    profile = load_profile("tinker")
    assert profile.locked["env"]["eval_limit_ratio"] == 0.1 and profile.inference["num_requests_for_eval"] == 256
    async with mcp_app(profile="tinker") as (app, server), Client(server) as client:
        selected = await client.call_tool("rl_select_environment", {"name": "probe"})
        fields = {f["name"]: f for f in selected.structured_content["config"]["fields"]}
        assert (fields["eval_limit_ratio"]["value"], fields["eval_limit_ratio"]["status"]) == (0.1, "locked")
        _, schema = await app.selected_schema()
        config = render_run_config(
            profile=profile,
            schema=schema,
            state=app.session.state,
            api_port=1,
            inference_port=2,
            run_dir=app.settings.home,
        )
        assert config["env"]["eval_limit_ratio"] == 0.1 and config["openai"][0]["num_requests_for_eval"] == 256


# --- 6. completions, the prompt, resource links ------------------------------------------------


def _completed_run(home: Path) -> None:
    run_dir = home / "runs" / "done-run"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(
        yaml.safe_dump({"trainer": {"wandb_project": "proj", "run_name": "done-name"}})
    )
    RunStore(home / "runs.sqlite").insert(
        RunRecord(
            run_id="done-run",
            environment="letter_repeat",
            profile="local",
            status="completed",
            run_dir=str(run_dir),
            config_path=str(run_dir / "config.yaml"),
            run_name="done-name",
            total_steps=3,
            api_port=1,
            inference_port=2,
            created_at=time.time() - 60,
            ended_at=time.time(),
        )
    )


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_completions_prompt_and_resource_links(mcp_app, rl_home: Path, mode: str) -> None:
    _completed_run(rl_home)
    async with mcp_app() as (_, server), Client(server, mode=mode) as client:
        prompt_ref = PromptReference(name="rl_workflow")
        envs = await client.complete(prompt_ref, {"name": "environment", "value": "le"})
        assert envs.completion.values == ["letter_repeat"]
        fields = await client.complete(
            prompt_ref, {"name": "focus_field", "value": "group"}, context_arguments={"environment": "letter_repeat"}
        )
        assert "group_size" in fields.completion.values
        runs = await client.complete(
            ResourceTemplateReference(uri="rl://runs/{run_id}"), {"name": "run_id", "value": ""}
        )
        assert runs.completion.values == ["done-run"]
        names = await client.complete(
            ResourceTemplateReference(uri="rl://environments/{name}"), {"name": "name", "value": "gsm"}
        )
        assert names.completion.values == ["gsm8k_tinker"]
        procs = await client.complete(
            ResourceTemplateReference(uri="rl://runs/{run_id}/logs/{process}"), {"name": "process", "value": "t"}
        )
        assert procs.completion.values == ["trainer"]

        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        assert {a.name for a in prompts["rl_workflow"].arguments or []} == {"environment", "focus_field"}
        got = await client.get_prompt("rl_workflow", {"environment": "letter_repeat", "focus_field": "group_size"})
        text = got.messages[0].content.text  # type: ignore[union-attr]
        for step in (
            "rl_select_environment",
            "rl_test_inference",
            "rl_start_training",
            "rl_check_status",
            "rl_get_results",
        ):
            assert step in text
        assert "rl://config/group_size" in text

        status = await client.call_tool("rl_check_status", {"run_id": "done-run"})
        links = {b.uri for b in status.content if isinstance(b, ResourceLink)}
        assert {"rl://runs/done-run/metrics", "rl://runs/done-run/logs/trainer"} <= {str(u) for u in links}
        sc = status.structured_content
        assert (sc["environment"], sc["wandb_project"], sc["wandb_run_name"]) == ("letter_repeat", "proj", "done-name")
        results = await client.call_tool("rl_get_results", {"run_id": "done-run"})
        assert any(isinstance(b, ResourceLink) for b in results.content)
        assert results.structured_content["wandb_run_name"] == "done-name"


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
async def test_config_field_resource(mcp_app, probe_envs, mode: str) -> None:
    async with mcp_app() as (_, server), Client(server, mode=mode) as client:
        await client.call_tool("rl_select_environment", {"name": "probe"})
        got = await client.complete(
            ResourceTemplateReference(uri="rl://config/{field}"), {"name": "field", "value": "diff"}
        )
        assert got.completion.values == ["difficulty"]
        field = await client.read_resource("rl://config/difficulty")
        assert '"name": "difficulty"' in field.contents[0].text  # type: ignore[union-attr]


# --- 6. a paid start asks first (elicitation), or shows the figures ----------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("answer", ["accept", "decline", "no_elicitation"])
async def test_a_paid_start_is_confirmed_by_elicitation(
    mcp_app, probe_envs, monkeypatch, mode: str, answer: str
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", FAKE_KEY)
    asked: list[str] = []

    async def on_elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return (
            ElicitResult(action="accept", content={"confirm": True})
            if answer == "accept"
            else ElicitResult(action="decline")
        )

    async with mcp_app(profile="tinker") as (app, server):
        starts: list[Any] = []

        async def fake_start(plan: Any, **_: Any) -> RunRecord:
            starts.append(plan)
            run_dir = app.settings.home / "runs" / "paid-run"
            return RunRecord(
                "paid-run", "probe", "tinker", "starting", str(run_dir), str(run_dir / "c.yaml"), "n", 2500, 1, 2, 0.0
            )

        monkeypatch.setattr(app.runs_manager, "start", fake_start)
        callback = None if answer == "no_elicitation" else on_elicit
        async with Client(server, mode=mode, elicitation_callback=callback) as client:
            await client.call_tool("rl_select_environment", {"name": "probe"})
            result = await client.call_tool("rl_start_training", {})
    text = result.content[0].text  # type: ignore[union-attr]
    assert FAKE_KEY not in text
    if answer == "decline":
        assert result.is_error and "declined" in text and starts == []
    else:
        assert not result.is_error and len(starts) == 1, text
        cost = result.structured_content["cost_estimate"]
        assert cost["confirmed"] == ("elicitation" if answer == "accept" else "not_asked")
        assert cost["max_tokens"] == 2500 * 128 * 8192 and cost["estimated_usd"] is None
    if answer == "no_elicitation":
        assert asked == []
    else:
        assert len(asked) == 1 and "2500 steps" in asked[0] and "tokens" in asked[0] and FAKE_KEY not in asked[0]


@pytest.mark.anyio
async def test_the_figures_are_in_the_answer_and_nothing_is_asked_on_the_local_profile(mcp_app, monkeypatch) -> None:
    asked: list[str] = []

    async def on_elicit(context: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="decline")

    async with mcp_app() as (app, server):
        from rl_mcp.mcp_api import spend

        figures = await spend.figures_for(app)
        assert figures is None  # local: nothing is paid
        async with Client(server, elicitation_callback=on_elicit) as client:
            answer = await client.call_tool("rl_start_training", {})
        assert answer.is_error and "no environment is selected" in answer.content[0].text  # type: ignore[union-attr]
    assert asked == []
