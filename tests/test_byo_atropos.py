"""A user's own Atropos environments run unchanged: four files in the shapes upstream ones take
(examples/atropos_envs/), each configured, tested against inference and trained for 2 steps
through the MCP tools on the local backend; the first batch the trainer took decodes back to the
conversation, with only the assistant's tokens trained. Plus the two atroposlib fixes alone."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client

from rl_mcp.app import open_app
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import Settings
from tinker_atropos.models import ensure_model

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ENV_DIR = Path(__file__).resolve().parents[1] / "examples" / "atropos_envs"
SMALL = {"total_steps": 2, "group_size": 4, "batch_size": 8}
# environment -> one of its own config fields that rl_get_current_config must show
OWN_FIELD = {"echo_word": "target_letter", "count_on": "start", "walk_steps": "turns", "capitals_qa": "dataset_name"}


def tiny_tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ensure_model("tiny-chat")))


def trained_spans(tokens: list[int], masks: list[int]) -> list[list[int]]:
    """The runs of tokens the trainer learns from (mask != -100)."""
    spans: list[list[int]] = []
    for i, (token, mask) in enumerate(zip(tokens, masks)):
        if mask == -100:
            continue
        assert mask == token, f"position {i}: mask {mask} is neither -100 nor the token {token}"
        if i == 0 or masks[i - 1] == -100:
            spans.append([])
        spans[-1].append(token)
    return spans


def assert_only_assistant_tokens_trained(tokenizer: Any, sequence: dict[str, Any]) -> None:
    tokens, masks, messages = sequence["tokens"], sequence["masks"], sequence["messages"]
    assert len(tokens) == len(masks) > 2 and all(isinstance(t, int) for t in tokens)
    text = tokenizer.decode(tokens)
    assert text.startswith(tokenizer.apply_chat_template(messages[:1], tokenize=False))  # the conversation
    # a reply may hold a special token the policy sampled: its message text is decoded without it
    plain = tokenizer.decode(tokens, skip_special_tokens=True)
    for message in messages:
        assert message["content"] in text or message["content"] in plain, (message, text)
    replies = [m["content"] for m in messages if m["role"] == "assistant"]
    trained = trained_spans(tokens, masks)
    spans = [tokenizer.decode(span) for span in trained]
    assert len(spans) == len(replies), (spans, replies)
    # each trained span is one reply, then nothing but special tokens the policy sampled: the end of
    # turn or the other EOS that stopped it, or one that a length cut left at its end
    for ids, span, reply in zip(trained, spans, replies):
        whole = span if span.startswith(reply) else tokenizer.decode(ids, skip_special_tokens=True)
        assert whole.startswith(reply), (span, reply)
        rest = whole[len(reply) :]
        for special in (added.content for added in tokenizer.added_tokens_decoder.values() if added.special):
            rest = rest.replace(special, "")
        assert not rest.strip(), (span, reply)
    for message in messages:
        if message["role"] != "assistant":
            assert all(message["content"] not in span for span in spans if message["content"])


@pytest.fixture(scope="module")
def offline_dataset(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A `datasets` dataset folder of parquet files and an empty datasets cache."""
    from datasets import Dataset

    root = tmp_path_factory.mktemp("dataset")
    rows = {"question": ["Capital of France?", "Capital of Peru?"], "answer": ["Paris", "Lima"]}
    (root / "capitals" / "data").mkdir(parents=True)
    Dataset.from_dict(rows).to_parquet(root / "capitals" / "data" / "train-00000-of-00001.parquet")
    return root / "capitals", root / "hf-datasets-cache"


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content or {}


@pytest.mark.parametrize("env_name", list(OWN_FIELD))
async def test_an_upstream_shaped_environment_runs_unchanged(
    env_name: str, offline_dataset: tuple[Path, Path], rl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dataset, datasets_cache = offline_dataset
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(ENV_DIR))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(datasets_cache))
    async with open_app(Settings.from_env(profile="local", stop_runs_on_exit=True)) as app:
        async with Client(build_server(app)) as client:
            await call(client, "rl_select_environment", name=env_name)
            config = await call(client, "rl_get_current_config")
            assert OWN_FIELD[env_name] in json.dumps(config), config
            if env_name == "capitals_qa":
                await call(client, "rl_edit_config", field="dataset_name", value=str(dataset))
            tested = await call(client, "rl_test_inference", num_steps=1, group_size=4, timeout_s=240)
            (model,) = tested["results"]
            assert model["status"] == "ok", (model["error"], model["log_tail"])
            assert len(model["step_scores"][0]) == 4
            for field, value in SMALL.items():
                await call(client, "rl_edit_config", field=field, value=value)
            run = await call(client, "rl_start_training")
            env_environ: dict[str, str] = {}
            with anyio.fail_after(300):
                while (status := await call(client, "rl_check_status", run_id=run["run_id"]))["status"] in (
                    "starting",
                    "running",
                    "stopping",
                ):
                    for proc in status["processes"]:
                        if proc["name"] == "env" and not env_environ:
                            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                                env_environ.update(psutil.Process(proc["pid"]).environ())
                    await anyio.sleep(0.3)
    assert status["status"] == "completed", (status["error"], status.get("failure_log_tail"))
    assert status["step"] == 2
    first = json.loads((Path(run["run_dir"]) / "first_batch.json").read_text())
    assert first["step"] == 1 and first["groups"]
    tokenizer = tiny_tokenizer()
    for group in first["groups"]:
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"]):
            assert_only_assistant_tokens_trained(tokenizer, {"tokens": tokens, "masks": masks, "messages": messages})
    assert env_environ["HF_DATASETS_CACHE"] == str(datasets_cache) and env_environ["HF_DATASETS_OFFLINE"] == "1"
    if env_name == "capitals_qa":
        assert any(datasets_cache.iterdir())  # the dataset went through the cache the test named


def test_tokenize_for_trainer_matches_a_hand_made_expectation() -> None:
    """The fix alone: atroposlib's own function, after `apply()`, gives ids and masks built by hand."""
    from tinker_atropos.env_process import atropos_compat

    atropos_compat.apply()
    from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

    tokenizer = tiny_tokenizer()
    chat = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "ok"},
    ]
    ids = tokenizer.convert_tokens_to_ids
    start, end = ids("<|im_start|>"), ids("<|im_end|>")

    def turn(role: str, content: str) -> list[int]:  # the tiny model's tokenizer: one token per byte
        return [start, *f"{role}\n{content}".encode(), end, ord("\n")]

    expected = [*turn("user", "hi"), *turn("assistant", "yo"), *turn("user", "again"), *turn("assistant", "ok")]
    header = len(turn("assistant", "")) - 2  # "<|im_start|>assistant\n": the generation prompt
    last_reply = turn("assistant", "ok")[header:]
    out = tokenize_for_trainer(tokenizer, chat)
    assert out["tokens"] == expected
    assert out["masks"] == [-100] * (len(expected) - len(last_reply)) + last_reply
    both = tokenize_for_trainer(tokenizer, chat, train_on_all_assistant_turns=True)
    first_reply = turn("assistant", "yo")[header:]
    prefix = len(turn("user", "hi")) + header
    assert both["masks"][prefix : prefix + len(first_reply)] == first_reply
    assert both["masks"][-len(last_reply) :] == last_reply
    assert sum(m != -100 for m in both["masks"]) == len(first_reply) + len(last_reply)


@pytest.mark.parametrize("declared", ["single APIServerConfig", "ServerBaseline"])
def test_the_yaml_server_is_the_one_an_environment_uses(declared: str) -> None:
    """Without the fix atroposlib sends such an environment's requests to localhost:9004-9007."""
    from tinker_atropos.env_process import atropos_compat

    atropos_compat.apply()
    import logging

    import atroposlib.envs.base as base
    from atroposlib.envs.server_handling.server_manager import APIServerConfig, ServerBaseline, ServerManager

    yaml_server = {"model_name": "m", "base_url": "http://127.0.0.1:8123/v1", "api_key": "x", "server_type": "openai"}
    default: Any = ServerBaseline() if declared == "ServerBaseline" else APIServerConfig(**yaml_server)
    merged = {**APIServerConfig().model_dump(), **yaml_server}
    configs = base.resolve_openai_configs(default, merged, {"openai": [yaml_server]}, {}, logging.getLogger("t"))
    manager = ServerManager(configs)
    assert [s.config.base_url for s in manager.servers] == ["http://127.0.0.1:8123/v1"]
    assert base.resolve_openai_configs(ServerBaseline(), merged, {}, {}, logging.getLogger("t")) == ServerBaseline()


def test_the_fixes_are_applied_in_a_fresh_environment_process(tmp_path: Path) -> None:
    """The launcher applies them before the environment's file runs (no site-packages edit)."""
    probe = tmp_path / "probe_env.py"
    probe.write_text(
        "import atroposlib.utils.tokenize_for_trainer as t\n"
        "import atroposlib.envs.base as base\n"
        "print(getattr(t.tokenize_for_trainer, '_tinker_atropos_compat', False),"
        " getattr(base.resolve_openai_configs, '_tinker_atropos_compat', False),"
        " getattr(base.BaseEnv.get_status, '_tinker_atropos_compat', False),"
        " getattr(base.BaseEnv._register_env, '_tinker_atropos_compat', False),"
        " type(base.asyncio).__name__ == '_AsyncioWithoutStartPause')\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "rl_mcp.children.env_process", str(probe)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 5
