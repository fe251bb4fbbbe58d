"""reasoning-gym's tasks as environments: each listed by name from the shipped catalog (which must match
the installed package), configured with its generator's settings, scored by rl_test_inference and
trained 2 steps on the local backend, with only the policy's tokens trained."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp import Client
from test_byo_atropos import call, tiny_tokenizer
from test_runs_resume_e2e import ended, wait_for

from rl_mcp.app import open_app
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import Settings
from tinker_atropos.environments.reasoning_gym_catalog import CATALOG_FILE, build_catalog, render

pytestmark = pytest.mark.anyio
TASK = "reasoning_gym:leg_counting"
SMALL = {"total_steps": 2, "group_size": 4, "batch_size": 8, "eval_size": 4, "max_completion_tokens": 16}


def test_the_shipped_catalog_is_the_installed_packages() -> None:
    """Regenerate with `python -m tinker_atropos.environments.reasoning_gym_catalog` when this fails."""
    assert render(build_catalog()) == CATALOG_FILE.read_text()


def test_a_setting_is_taken_as_the_generator_types_it_and_a_wrong_one_is_named() -> None:
    from tinker_atropos.environments.reasoning_gym_tasks import generator_settings

    # basic_arithmetic declares `operators` a tuple: JSON's list comes back as one
    assert generator_settings("basic_arithmetic", {"operators": ["+", "-"], "max_terms": 3}) == {
        "operators": ("+", "-"),
        "max_terms": 3,
    }
    with pytest.raises(ValueError, match="leg_counting has no setting legs: its settings are max_animals"):
        generator_settings("leg_counting", {"legs": 4})
    with pytest.raises(ValueError, match="unknown reasoning-gym task 'leg_count': known tasks are ab, acre"):
        generator_settings("leg_count", {})


async def test_every_task_is_an_environment_with_its_generator_settings_as_fields(rl_home: Path) -> None:
    catalog = json.loads(CATALOG_FILE.read_text())
    async with open_app(Settings.from_env(profile="local")) as app, Client(build_server(app)) as client:
        listed = await call(client, "rl_list_environments")
        (family,) = listed["task_catalogs"]  # by name only: 106 full entries would bury the rest
        assert (family["host"], family["format"]) == ("reasoning_gym", "reasoning-gym"), family
        assert family["tasks"] == sorted(f"reasoning_gym:{t}" for t in catalog["tasks"])
        names = [e["name"] for e in listed["environments"]]
        assert "reasoning_gym" in names and not any(n.startswith("reasoning_gym:") for n in names)
        info = app.environment(TASK)  # the entry itself, as select and start see it
        assert (info.class_name, info.format, info.entry) == ("ReasoningGymEnv", "reasoning-gym", "leg_counting")
        assert "leg counting" in info.description and "0.1.25" in info.description

        await call(client, "rl_select_environment", name=TASK)
        fields = {f["name"]: f for f in (await call(client, "rl_get_current_config"))["fields"]}
        assert "task" not in fields and "task_config" not in fields  # the task's own
        setting = fields["max_animals"]
        assert (setting["section"], setting["type"], setting["default"], setting["editable"]) == (
            "task",
            "int",
            10,
            True,
        )
        assert fields["group_size"]["section"] == "env" and fields["learning_rate"]["section"] == "trainer"
        refused = await client.call_tool("rl_edit_config", {"field": "max_animals", "value": "many"})
        assert refused.is_error and "max_animals" in refused.content[0].text  # type: ignore[union-attr]
        await call(client, "rl_edit_config", field="max_animals", value=4)
        source = await client.read_resource(f"rl://environments/{TASK}")
        assert "class ReasoningGymEnv" in source.contents[0].text  # type: ignore[union-attr]


@pytest.mark.slow
async def test_a_task_is_scored_and_trained_on_the_local_backend(rl_home: Path) -> None:
    async with open_app(Settings.from_env(profile="local", stop_runs_on_exit=True)) as app:
        async with Client(build_server(app)) as client:
            await call(client, "rl_select_environment", name=TASK)
            for field, value in {**SMALL, "max_animals": 4}.items():
                await call(client, "rl_edit_config", field=field, value=value)
            tested = await call(client, "rl_test_inference", num_steps=1, group_size=4, timeout_s=240)
            (model,) = tested["results"]
            assert model["status"] == "ok", (model["error"], model["log_tail"])
            assert len(model["step_scores"][0]) == 4 and all(0.0 <= s <= 1.0 for s in model["step_scores"][0])
            run = await call(client, "rl_start_training")
            assert run["run_id"].startswith("reasoning_gym.leg_counting-"), run
            env = yaml.safe_load(Path(run["config_path"]).read_text())["env"]
            assert (env["task"], env["task_config"]) == ("leg_counting", {"max_animals": 4}), env
            status = await wait_for(client, run["run_id"], ended, 300)
    assert status["status"] == "completed" and status["step"] == 2, status
    first: dict[str, Any] = json.loads((Path(run["run_dir"]) / "first_batch.json").read_text())
    tokenizer = tiny_tokenizer()
    for group in first["groups"]:
        for tokens, masks in zip(group["tokens"], group["masks"]):
            # the problem as posed (system prompt, question, the assistant's turn opened), never trained;
            # then the policy's reply, every token of it trained
            start = next(i for i, m in enumerate(masks) if m != -100)
            assert masks[start:] == tokens[start:], masks
            prompt = tokenizer.decode(tokens[:start])
            assert "<answer>" in prompt and "how many legs" in prompt, prompt
            assert prompt.endswith("<|im_start|>assistant\n"), prompt
