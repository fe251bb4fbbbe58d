"""OpenEnv environments' rollouts against their real servers (served from `.venv-openenv`): a typed
environment made by `openenv init` and an MCPEnvironment, each episode on a WebSocket session of its
own, only the model's turns trained, the reward the episode's own; nothing left running."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import psutil
import pytest
from agent_helpers import close_env, make_env
from openenv_envs import (
    CRASHING_ENVIRONMENT,
    OPENENV_VENV,
    SERIAL_ENVIRONMENT,
    items_file,
    mcp_env,
    template_env,
    typed_env,
)
from pydantic import BaseModel, Field

from tinker_atropos.agent.trajectory import format_trajectory
from tinker_atropos.environments.openenv_env import OpenEnvEnv, text_field
from tinker_atropos.openenv.folder import read_openenv_folder
from tinker_atropos.openenv.servers import ServerFailed, start_servers, stop_all
from tinker_atropos.openenv.wire import CapacityRefused, OpenEnvError, open_episode
from tinker_atropos.sft.examples import Example, Refused
from tinker_atropos.sft.settings import SftSettings, TeacherSettings
from tinker_atropos.sft.teacher import teacher_examples

pytestmark = pytest.mark.anyio


def _call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def openenv_servers() -> list[psutil.Process]:
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "openenv/serve.py" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.Error:
            continue
    return found


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("openenv")
    return {"typed": typed_env(root), "mcp": mcp_env(root)}


@asynccontextmanager
async def set_up(env: OpenEnvEnv) -> AsyncIterator[OpenEnvEnv]:
    """The environment set up (its servers started), then closed: its servers and temporary logs gone."""
    try:
        await env.setup()
        yield env
    finally:
        await env.close()
        await close_env(env)
    temp_logs = getattr(env, "temp_logs", None)
    assert temp_logs is None or not temp_logs.exists(), temp_logs


async def group_of(env: OpenEnvEnv, item: int = 0):
    return (await env.collect_trajectories(env.train_items[item]))[0]


def env_for(url: str, tiny_path: Path, folder: Path, items: Path, **overrides) -> OpenEnvEnv:
    settings = {"group_size": 2, "eval_fraction": 0.0, "max_concurrent_sessions": 2, **overrides}
    return make_env(OpenEnvEnv, url, tiny_path, openenv_folder=str(folder), items_file=str(items), **settings)


async def test_a_typed_environment_pays_the_right_action_and_ends_the_episode(
    scripted, tiny_path, folders, tmp_path
) -> None:
    url, sampler = scripted
    items = items_file(tmp_path / "items.jsonl", {"reset": {"word": "drawer"}})
    async with set_up(env_for(url, tiny_path, folders["typed"], items, action_mode="tool")) as env:
        sampler.script = [_call("step", answer="reward"), "Done."]
        group = await group_of(env)
        assert group["scores"] == [1.0, 1.0] and group["overrides"][0]["correct"]
        assert [t.name for t in env.offered] == ["step"] and env.offered[0].input_schema["required"] == ["answer"]
        messages = group["messages"][0]
        assert "Reverse the word 'drawer'." in messages[1]["content"]
        assert len([m for m in messages if m["role"] == "assistant"]) == 1  # `done` ended it: no second turn
        tokens, masks = group["tokens"][0], group["masks"][0]
        trained = env.tokenizer.decode([t for t, m in zip(tokens, masks) if m != -100])
        assert '"answer": "reward"' in trained and "drawer" not in trained

        sampler.script = [_call("step", answer="drawer"), "Done."]  # wrong: paid nothing
        group = await group_of(env)
        assert group["scores"] == [0.0, 0.0] and not group["overrides"][0]["correct"]
        sampler.script = [_call("step", nope=1), "I give up."]  # not an action: the model reads why, it goes on
        group = await group_of(env)
        reply = group["messages"][0][3]["content"]
        assert group["scores"] == [0.0, 0.0] and group["overrides"][0]["tool_errors"] == 1 and "answer" in reply
    assert openenv_servers() == []


async def test_a_reply_is_the_action_where_its_one_required_field_is_a_string(scripted, tiny_path, tmp_path) -> None:
    """`openenv init`'s own template, by default: no tool offered, each reply sent whole as `message`
    (one step a turn), each observation the next user message, the step rewards summed."""
    url, sampler = scripted
    items = items_file(tmp_path / "items.jsonl", {"reset": {}})
    sampler.script = ["hi", "hello"]
    async with set_up(env_for(url, tiny_path, template_env(tmp_path), items, max_agent_turns=2)) as env:
        group = await group_of(env)
    assert env.text_field == "message" and "as its `message` (Message to echo back)" in str(env.cfg.system_prompt)
    assert group["scores"] == [pytest.approx(0.2 + 0.5)] * 2 and group["overrides"][0]["tool_calls"] == 2
    messages = group["messages"][0]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[2]["action"] == {"message": "hi"} and '"echoed_message": "hi"' in messages[3]["content"]
    assert '[TEXT ACTION] {"message": "hello"}' in format_trajectory(messages)
    tokens, masks = group["tokens"][0], group["masks"][0]
    trained = env.tokenizer.decode([t for t, m in zip(tokens, masks) if m != -100])
    assert "hi" in trained and "hello" in trained and "echoed_message" not in trained and "<tool_call>" not in trained
    assert openenv_servers() == []


async def test_a_cold_model_answering_in_text_gets_rewards_that_differ_within_a_group(
    smollm2_url: str, tmp_path: Path
) -> None:
    """Untrained SmolLM2, which never calls a tool `step` (every group tied at zero): as text, its own
    replies are the action, and the template pays them by their length (0.1 a character up to 1; two
    tokens a reply keep most under the cap): the group has a signal."""
    from tinker_atropos.models import model_dir

    items = items_file(tmp_path / "items.jsonl", {"reset": {}})
    env = env_for(smollm2_url, model_dir("smollm2-135m"), template_env(tmp_path), items, group_size=8)
    env.config.max_agent_turns, env.config.max_turn_tokens = 1, 2
    async with set_up(env) as env:
        group = await group_of(env)
    assert env.text_field == "message"
    assert len(set(group["scores"])) > 1 and max(group["scores"]) > 0, group["scores"]


class Move(BaseModel):
    """An action of two required fields (OpenEnv's `metadata` beside them)."""

    metadata: dict = Field(default_factory=dict)
    row: int
    col: str
    note: str | None = None


class Answer(BaseModel):
    metadata: dict = Field(default_factory=dict)
    answer: str
    hint: str = ""


def test_text_is_the_default_only_where_the_action_fits_and_refused_with_its_fields_elsewhere() -> None:
    move, answer = Move.model_json_schema(), Answer.model_json_schema()
    assert text_field(answer, None) == text_field(answer, "text") == "answer" and text_field(answer, "tool") is None
    assert text_field(move, None) is None and text_field(move, "tool") is None and text_field(None, None) is None
    with pytest.raises(
        ValueError,
        match=r"Move has row \(integer, required\), col \(string, required\), note "
        r"\(string or null\): set action_mode to 'tool'",
    ):
        text_field(move, "text")
    with pytest.raises(ValueError, match="acts through its MCP tools; set action_mode to 'tool'"):
        text_field(None, "text")


async def test_an_mcp_environment_offers_its_tools_and_pays_at_submit(scripted, tiny_path, folders, tmp_path) -> None:
    url, sampler = scripted
    items = items_file(tmp_path / "items.jsonl", {"reset": {"a": 12, "b": 11}, "prompt": "Solve it."})
    async with set_up(env_for(url, tiny_path, folders["mcp"], items)) as env:
        sampler.script = [_call("multiply", a=12, b=11), _call("submit", answer=132), "Done."]
        group = await group_of(env)
        assert {t.name for t in env.offered} == {"multiply", "submit"} and env.mcp
        assert group["scores"] == [1.0, 1.0]
        messages = group["messages"][0]
        assert messages[1]["content"].startswith("Solve it.") and "What is 12 times 11?" in messages[1]["content"]
        assert messages[3]["content"] == "132" and messages[5]["content"] == "correct"
        assert group["overrides"][0]["turns"] == 2  # submit said done
        sampler.script = [_call("submit", answer=131)]
        group = await group_of(env)
        assert group["scores"] == [0.0, 0.0]
    assert openenv_servers() == []


async def test_a_server_that_cannot_start_or_dies_mid_episode_is_named_with_its_output(
    scripted, tiny_path, tmp_path
) -> None:
    url, sampler = scripted
    items = items_file(tmp_path / "items.jsonl", {"reset": {"word": "drawer"}})
    broken = typed_env(tmp_path / "broken")
    with (broken / "server" / "app.py").open("a") as app:
        app.write("\nraise RuntimeError('the app refuses to start')\n")
    env = env_for(url, tiny_path, broken, items)
    with pytest.raises(ServerFailed, match=r"exited with code 1; its output ends:(.|\n)*the app refuses to start"):
        async with set_up(env):
            pass
    assert not env.temp_logs.exists()  # the failure carries the log's tail: nothing is lost with the folder

    sampler.script = [_call("step", answer="reward")]
    env = env_for(url, tiny_path, typed_env(tmp_path / "crash", CRASHING_ENVIRONMENT), items, group_size=1)
    async with set_up(env):
        with pytest.raises(OpenEnvError, match="exited with code 3"):
            await env.rollout(env.train_items[0])
    assert openenv_servers() == []


async def test_a_server_by_url_and_its_capacity(scripted, tiny_path, tmp_path) -> None:
    """The user's own server (one session: its environment cannot share one) trains by URL; a second
    episode waits for the session, then is refused by name; a folder of it gets a server per session."""
    url, sampler = scripted
    folder = read_openenv_folder(typed_env(tmp_path / "serial", SERIAL_ENVIRONMENT))
    (own,) = await start_servers(str(OPENENV_VENV / "python"), folder, 1, tmp_path, 60)
    try:
        items = items_file(tmp_path / "items.jsonl", {"reset": {"word": "live"}})
        sampler.script = ["evil"]  # the reply is the action (text mode, the default where it fits)
        env = make_env(OpenEnvEnv, url, tiny_path, openenv_url=own.url, items_file=str(items), group_size=1)
        async with set_up(env):
            group = await group_of(env)
        assert group["scores"] == [1.0]
        async with open_episode(own.url, {}, timeout_s=10, capacity_wait_s=1):
            with pytest.raises(CapacityRefused, match=r"stayed taken for 1 s(.|\n)*max_concurrent_sessions"):
                async with open_episode(own.url, {}, timeout_s=10, capacity_wait_s=1):
                    pass
    finally:
        await stop_all([own])
    async with set_up(env_for(url, tiny_path, folder.path, items, max_concurrent_sessions=2)) as env:
        assert [s.sessions for s in env.servers] == [1, 1]
    assert openenv_servers() == []


async def test_a_teacher_plays_the_environment_for_the_supervised_stage(scripted, tiny_path, folders, tmp_path) -> None:
    """The [sft] stage's teacher source through an OpenEnv environment: the teacher's episodes kept
    where the environment paid, the best of each item, as examples of the student's own tokens."""
    url, sampler = scripted
    items = items_file(tmp_path / "items.jsonl", {"reset": {"a": 3, "b": 5}})
    sampler.script = [_call("multiply", a=3, b=5), _call("submit", answer=15), "Done."]
    student, teacher = (env_for(url, tiny_path, folders["mcp"], items) for _ in range(2))
    settings = SftSettings(
        sources=["teacher"], teacher=TeacherSettings(base_url=f"{url}/v1", model="t", samples_per_item=2), items=1
    )
    async with set_up(student), set_up(teacher):
        made = await teacher_examples(student, teacher, settings, lambda _: None)
    kept = [m for m in made if isinstance(m, Example)]
    assert len(kept) == 1 and kept[0].tool_calls == 2
    assert [m.reason for m in made if isinstance(m, Refused)] == ["not among the best 1 of its item"]
    trained = student.tokenizer.decode([t for t, m in zip(kept[0].tokens, kept[0].masks) if m != -100])
    assert '"name": "submit"' in trained and "What is 3 times 5?" not in trained
    assert openenv_servers() == []
