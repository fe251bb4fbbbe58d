"""rl_test_inference: target choice, key hygiene, JSONL scoring, and real runs through an MCP client.

The runs are real: the environment's atroposlib `process` mode in a subprocess against the local
backend's inference server (a real uvicorn process serving the tiny model), driven through the
SDK's in-memory client. The scoring helpers are checked against hand-computed cases.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest
import warm_children
import yaml
from mcp import Client
from test_inference_server import wait_healthy

from rl_mcp.inference.scores import read_groups, summarize
from rl_mcp.inference.target import (
    OPENROUTER_BASE_URL,
    OPENROUTER_MODELS,
    InferenceTestError,
    child_env,
    resolve_target,
)

ROOT = Path(__file__).resolve().parents[1]
LOCAL_CONFIG = ROOT / "tinker-atropos" / "configs" / "local.yaml"
SENTINEL = "sk-or-v1-SENTINEL-7f3e9b1c2d4a"  # shaped like an OpenRouter key; fake


# --- scoring the JSONL (hand-computed) ------------------------------------------------------------


def group(scores, *, correct=None, messages=None, logprobs=None) -> dict:
    g = {"tokens": [[1, 2, 3]] * len(scores), "masks": [[-100, 2, 3]] * len(scores), "scores": scores}
    if correct is not None:
        g["overrides"] = [{"correct": c} for c in correct]
    if messages is not None:
        g["messages"] = messages
    if logprobs is not None:
        g["inference_logprobs"] = logprobs
    return g


def test_summary_uses_the_environments_verdict_when_given_else_positive_score():
    groups = [
        group([0.9, 0.2, 0.0, 1.0], correct=[False, False, False, True]),  # shaped reward: verdict wins
        group([0.5, 0.5, 0.5, 0.5], correct=[False] * 4),
        group([1.0, -1.0, 0.0, 2.0]),  # no verdict: positive score counts
    ]
    s = summarize(groups)  # float64 means of a dozen scores: approx's default rel 1e-6 >> their rounding
    assert (s.steps_tested, s.completions, s.correct) == (3, 12, 3)
    assert s.accuracy == pytest.approx(3 / 12)
    assert s.step_success_rate == pytest.approx(2 / 3)
    assert s.mean_score == pytest.approx((2.1 + 2.0 + 2.0) / 12)
    assert s.step_scores == [[0.9, 0.2, 0.0, 1.0], [0.5] * 4, [1.0, -1.0, 0.0, 2.0]]


def test_samples_are_best_and_worst_with_prompt_and_reply_truncated():
    long_reply = "x" * 1000

    def conv(reply: str) -> list[dict]:
        return [{"role": "user", "content": "Repeat a"}, {"role": "assistant", "content": reply}]

    groups = [
        group([0.1, 0.7], messages=[conv("lo"), conv(long_reply)]),
        group([-0.5, 0.3], messages=[conv("worst"), conv("mid")]),
    ]
    best, worst = summarize(groups, sample_chars=50).samples
    assert (best.step, best.score, best.prompt) == (1, 0.7, "Repeat a")
    assert len(best.completion) == 50 and best.completion.endswith("…")
    assert (worst.step, worst.score, worst.completion) == (2, -0.5, "worst")


def test_a_decoded_single_turn_is_split_at_the_assistant_header():
    chatml = "<|im_start|>user\nRepeat a " + "p" * 600 + "<|im_end|>\n<|im_start|>assistant\naaaa<|im_end|>"
    unknown = "PROMPT " + "q" * 600 + " THE-REPLY"
    messages = [[{"role": "user", "content": chatml}], [{"role": "user", "content": unknown}]]
    first, second = summarize([group([1.0, 0.0], messages=messages)], sample_chars=40).samples
    assert first.completion == "aaaa" and first.prompt.startswith("…") and first.prompt.endswith("p<|im_end|>\n")
    # No known template: the end of the text, where the reply is.
    assert second.prompt == "" and second.completion.startswith("…") and second.completion.endswith("THE-REPLY")


def test_real_logprobs_are_told_from_prompt_placeholders_and_dummies():
    assert summarize([group([1.0], logprobs=[[1.0, -0.3, -2.1]])]).has_logprobs
    assert not summarize([group([1.0], logprobs=[[1.0, -0.5, -0.5, -0.5]])]).has_logprobs  # dummy server
    assert not summarize([group([1.0])]).has_logprobs


def test_only_complete_lines_are_read(tmp_path: Path):
    path = tmp_path / "groups.jsonl"
    path.write_text(json.dumps(group([1.0])) + "\n" + json.dumps(group([0.0]))[:20])  # writer mid-line
    assert [g["scores"] for g in read_groups(path)] == [[1.0]]
    assert read_groups(tmp_path / "missing.jsonl") == []
    s = summarize([])
    assert (s.steps_tested, s.accuracy, s.samples) == (0, 0.0, [])
    assert math.isclose(summarize([group(["nan?", 1.0])]).mean_score, 1.0)


# --- target choice and the children's environment ------------------------------------------------


def test_targets_follow_the_keys_present_and_the_arguments():
    local = resolve_target(models=None, base_url=None, api_key_env=None, environ={}, local_model="tiny-chat")
    assert (local.kind, local.models, local.server_type, local.key_env) == ("local", ("tiny-chat",), "sglang", None)
    router = resolve_target(
        models=None, base_url=None, api_key_env=None, environ={"OPENROUTER_API_KEY": SENTINEL}, local_model="tiny-chat"
    )
    assert (router.kind, router.base_url, router.models) == ("openrouter", OPENROUTER_BASE_URL, OPENROUTER_MODELS)
    assert router.key_env == "OPENROUTER_API_KEY" and router.server_type == "openai"
    chosen = resolve_target(
        models=[" a/b ", "a/b", "c"],
        base_url=None,
        api_key_env=None,
        environ={"OPENROUTER_API_KEY": SENTINEL},
        local_model="tiny-chat",
    )
    assert chosen.models == ("a/b", "c")
    # A base_url never receives the OpenRouter key unless its variable is named.
    custom = resolve_target(
        models=["m"],
        base_url="http://h:8000/v1/",
        api_key_env=None,
        environ={"OPENROUTER_API_KEY": SENTINEL},
        local_model="tiny-chat",
    )
    assert (custom.kind, custom.base_url, custom.key_env) == ("openai_compatible", "http://h:8000/v1", None)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"base_url": "http://h/v1"}, "base_url needs models"),
        ({"base_url": "ftp://h", "models": ["m"]}, "http(s) URL"),
        ({"base_url": "https://me:sk-123@h/v1", "models": ["m"]}, "must not carry credentials"),
        ({"base_url": "ftp://me:sk-123@h", "models": ["m"]}, "must not carry credentials"),
        ({"api_key_env": "MY_KEY"}, "NAME of an environment variable that is set"),
        ({"api_key_env": "sk-or-v1-abc"}, "never the key itself"),
    ],
)
def test_bad_target_arguments_say_what_to_do(kwargs, message):
    args = {"models": None, "base_url": None, "api_key_env": None, **kwargs}
    with pytest.raises(InferenceTestError) as err:
        resolve_target(**args, environ={}, local_model="tiny-chat")
    assert message in str(err.value)
    assert "sk-" not in str(err.value)  # a key passed by mistake is never echoed


def test_children_get_the_one_key_as_openai_api_key_and_no_other():
    environ = {
        "OPENROUTER_API_KEY": SENTINEL,
        "TINKER_API_KEY": "tml-x",
        "OPENAI_API_KEY": "sk-real",
        "OPENAI_ADMIN_KEY": "adm",
        "MY_KEY": "k-123",
        "PATH": "/bin",
    }
    target = resolve_target(
        models=["m"], base_url="http://h/v1", api_key_env="MY_KEY", environ=environ, local_model="x"
    )
    env = child_env(environ, target)
    assert env["OPENAI_API_KEY"] == "k-123" and "MY_KEY" not in env
    assert not {"OPENROUTER_API_KEY", "TINKER_API_KEY", "OPENAI_ADMIN_KEY"} & set(env)
    assert env["WANDB_MODE"] == "disabled" and env["ATROPOS_ALLOW_DUMMY_MANAGED_SERVER"] == "1"
    local_target = resolve_target(models=None, base_url=None, api_key_env=None, environ={}, local_model="x")
    local = child_env(environ, local_target)
    assert SENTINEL not in local.values() and "sk-real" not in local.values()
    assert "ATROPOS_ALLOW_DUMMY_MANAGED_SERVER" not in local


# --- real runs through the MCP server ------------------------------------------------------------


def our_processes(marker: str) -> list[psutil.Process]:
    """Live processes whose command line mentions `marker` (a test's private folder)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
        except psutil.Error:
            continue
    return found


async def call(client: Client, args: dict, progress: list | None = None):
    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, total, message))

    callback = on_progress if progress is not None else None
    return await client.call_tool("rl_test_inference", args, progress_callback=callback)


def assert_scores_match_the_file(result: dict, num_steps: int, group_size: int) -> list[dict]:
    """The answer's numbers, recomputed here from the JSONL atroposlib wrote."""
    lines = [json.loads(x) for x in Path(result["output_jsonl"]).read_text().splitlines() if x.strip()]
    assert len(lines) == num_steps == result["steps_tested"]
    assert [len(g["scores"]) for g in lines] == [group_size] * num_steps
    assert result["step_scores"] == [[round(float(s), 4) for s in g["scores"]] for g in lines]
    verdicts = [o["correct"] for g in lines for o in g["overrides"]]
    assert result["completions"] == len(verdicts) and result["correct"] == sum(verdicts)
    assert Path(result["output_html"]).is_file()
    return lines


@pytest.mark.anyio
async def test_letter_repeat_offline_against_the_local_server(mcp_app, rl_home: Path):
    progress: list = []
    async with mcp_app(profile="local") as (_, server), Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        hints = tools["rl_test_inference"].annotations
        assert (hints.read_only_hint, hints.destructive_hint, hints.open_world_hint) == (False, False, True)
        assert not (await client.call_tool("rl_select_environment", {"name": "letter_repeat"})).is_error
        res = await call(client, {"num_steps": 2, "group_size": 4, "timeout_s": 240}, progress)
    assert not res.is_error, res.content
    answer = res.structured_content
    assert answer["target"] == "local" and answer["environment"] == "letter_repeat"
    (model,) = answer["results"]
    assert model["status"] == "ok", (model["error"], model["log_tail"])
    assert model["model"] == "tiny-chat" and model["real_logprobs"] is True
    assert_scores_match_the_file(model, 2, 4)
    assert len(model["samples"]) == 2 and model["samples"][0]["score"] >= model["samples"][1]["score"]
    assert answer["environment_working"] is True and answer["best_model"] == "tiny-chat"
    assert answer["mean_accuracy"] == model["accuracy"]
    # One notification per scored group, counting up to the total (waiting reports in between, below the next).
    assert [(p, t) for p, t, m in progress if "scored" in m and "waiting" not in m] == [(1.0, 2.0), (2.0, 2.0)]
    assert all("tiny-chat" in m for _, _, m in progress)
    assert [p for p, _, _ in progress] == sorted({p for p, _, _ in progress})
    # The run's files live in a fresh folder under the state dir; nothing of it still runs.
    out = Path(answer["output_dir"])
    assert out.parent == rl_home / "inference_tests" and Path(model["log"]).is_file()
    config = yaml.safe_load(Path(model["config"]).read_text())
    assert config["openai"][0]["server_type"] == "sglang" and config["openai"][0]["api_key"] is None
    assert our_processes(str(out)) == []


@pytest.mark.anyio
async def test_gsm8k_offline_against_the_local_server(mcp_app):
    progress: list = []
    # The 2025 protocol generation (initialize handshake, progress tokens in _meta) here.
    async with mcp_app(profile="local") as (_, server), Client(server, mode="legacy") as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "gsm8k_tinker"})).is_error
        for field, value in (("dataset", "generated"), ("max_completion_tokens", 24)):
            assert not (await client.call_tool("rl_edit_config", {"field": field, "value": value})).is_error
        res = await call(client, {"num_steps": 1, "group_size": 3, "timeout_s": 240}, progress)
    assert not res.is_error, res.content
    assert [(p, t) for p, t, m in progress if "waiting" not in m] == [(1.0, 1.0)]
    (model,) = res.structured_content["results"]
    assert model["status"] == "ok", (model["error"], model["log_tail"])
    (line,) = assert_scores_match_the_file(model, 1, 3)
    assert set(line["scores"]) <= {0.0, 1.0}  # numeric verification: right or wrong
    assert len(model["samples"]) == 2 and all(s["completion"] for s in model["samples"])


@pytest.fixture(scope="module")
def inference_server(tmp_path_factory: pytest.TempPathFactory):
    """The local backend's standalone inference server as a real process: an OpenAI-compatible
    endpoint to test the base_url path against."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    ensure = [sys.executable, "-m", "tinker_atropos.models", "ensure", "tiny-chat"]
    built = warm_children.run(ensure, env=env, timeout=300)
    assert built.returncode == 0, built.stderr
    folder = built.stdout.strip().splitlines()[-1]
    work = tmp_path_factory.mktemp("inference-server")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = yaml.safe_load(LOCAL_CONFIG.read_text())
    cfg["env"]["tokenizer_name"] = cfg["openai"][0]["tokenizer_name"] = folder
    cfg["trainer"].update(inference_port=port, run_dir=str(work))
    (work / "config.yaml").write_text(yaml.safe_dump(cfg))
    argv = [sys.executable, "-m", "tinker_atropos.inference_server", "--config", str(work / "config.yaml")]
    with open(work / "server.log", "wb") as log:  # forked warm, as the server's inference test forks it
        proc = warm_children.start(argv, env=env, stdout=log.fileno(), stderr=log.fileno())
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}", work / "server.log", 120)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(20)


@pytest.mark.anyio
async def test_a_key_travels_only_by_environment_variable(mcp_app, rl_home, inference_server, monkeypatch):
    monkeypatch.setenv("RLMCP_TEST_KEY", SENTINEL)
    monkeypatch.setenv("OPENROUTER_API_KEY", SENTINEL + "-router")
    seen_argv: list[str] = []
    env_processes_environ: dict[int, str] = {}
    async with mcp_app(profile="local") as (_, server), Client(server) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "letter_repeat"})).is_error

        async def watch() -> None:
            while True:  # every process's argv, while the test runs
                for proc in psutil.process_iter(["cmdline"]):
                    try:
                        cmd = " ".join(proc.info["cmdline"] or [])
                        seen_argv.append(cmd)
                        if "rl_mcp.children.env_process" in cmd and str(rl_home) in cmd:
                            env_processes_environ[proc.pid] = json.dumps(proc.environ())
                    except psutil.Error:
                        continue
                await anyio.sleep(0.2)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            # Two names for the one served model: two environment processes, side by side.
            res = await call(
                client,
                {
                    "num_steps": 1,
                    "group_size": 2,
                    "models": ["tiny-chat", "tiny-chat-2"],
                    "base_url": inference_server,
                    "api_key_env": "RLMCP_TEST_KEY",
                    "timeout_s": 240,
                },
            )
            tg.cancel_scope.cancel()
    assert not res.is_error, res.content
    answer = res.structured_content
    assert [m["model"] for m in answer["results"]] == ["tiny-chat", "tiny-chat-2"]
    for model in answer["results"]:
        assert model["status"] == "ok", (model["error"], model["log_tail"])
        assert model["real_logprobs"] is False  # a plain chat endpoint: atroposlib's dummy managed server
    assert len({Path(m["output_jsonl"]).parent for m in answer["results"]}) == 2
    assert answer["target"] == "openai_compatible" and answer["key_env"] == "RLMCP_TEST_KEY"
    # The key did reach both environment processes, as OPENAI_API_KEY; the OpenRouter key did not.
    assert len(env_processes_environ) == 2
    assert all(f'"OPENAI_API_KEY": "{SENTINEL}"' in e for e in env_processes_environ.values())
    assert not any(SENTINEL + "-router" in e for e in env_processes_environ.values())
    # ... and nowhere else: no argv, no file, no answer.
    assert seen_argv and not [c for c in seen_argv if SENTINEL in c]
    for path in rl_home.rglob("*"):
        if path.is_file():
            assert SENTINEL.encode() not in path.read_bytes(), path
    assert SENTINEL not in json.dumps(answer) and SENTINEL not in res.content[0].text


@pytest.mark.anyio
async def test_an_unreachable_base_url_is_a_clear_error_at_once(mcp_app, free_port):
    port = free_port()  # nothing listens there
    async with mcp_app(profile="local") as (_, server), Client(server) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "letter_repeat"})).is_error
        started = time.monotonic()
        res = await call(client, {"models": ["m"], "base_url": f"http://127.0.0.1:{port}/v1", "timeout_s": 30})
        elapsed = time.monotonic() - started
    assert res.is_error
    text = res.content[0].text
    assert f"cannot connect to http://127.0.0.1:{port}/v1" in text and "server is up" in text
    assert elapsed < 30


BROKEN_AT_RUNTIME = '''"""Imports and configures fine; fails when it starts working."""
from atroposlib.envs.base import BaseEnv, BaseEnvConfig


class Crashy(BaseEnv):
    name = "crashy"

    @classmethod
    def config_init(cls):
        return BaseEnvConfig(group_size=2, wandb_name="crashy"), []

    async def setup(self):
        raise RuntimeError("crashy setup sentinel")

    async def get_next_item(self):
        return None

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    Crashy.cli()
'''


STUCK = '''"""Never scores a group: its rollouts never finish (one that returns no group is a discard,
reported as such: tests/test_env_stalls.py)."""
import asyncio

from atroposlib.envs.base import BaseEnv, BaseEnvConfig


class Stuck(BaseEnv):
    name = "stuck"

    @classmethod
    def config_init(cls):
        return BaseEnvConfig(group_size=2, wandb_name="stuck"), []

    async def setup(self):
        return None

    async def get_next_item(self):
        return "item"

    async def collect_trajectories(self, item):
        await asyncio.Event().wait()

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    Stuck.cli()
'''


@pytest.mark.anyio
async def test_an_environment_that_fails_gives_its_traceback_tail(mcp_app, tmp_path, monkeypatch, inference_server):
    env_dir = tmp_path / "envs"
    env_dir.mkdir()
    crashy = env_dir / "crashy.py"
    crashy.write_text(BROKEN_AT_RUNTIME)
    (env_dir / "stuck.py").write_text(STUCK)
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(env_dir))
    args = {"num_steps": 1, "group_size": 2, "models": ["tiny-chat"], "base_url": inference_server, "timeout_s": 120}
    async with mcp_app(profile="local") as (_, server), Client(server) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "crashy"})).is_error
        # Fails in its own process, after starting: the model's error and the log's last lines.
        res = await call(client, args)
        assert not res.is_error, res.content
        (model,) = res.structured_content["results"]
        assert model["status"] == "failed" and res.structured_content["environment_working"] is False
        assert "exited with code" in model["error"] and "crashy setup sentinel" in model["error"]
        assert "crashy setup sentinel" in model["log_tail"][-1]
        assert any(line.strip().startswith(f'File "{crashy}"') for line in model["log_tail"])
        # One whose rollouts never finish is stopped at its timeout.
        assert not (await client.call_tool("rl_select_environment", {"name": "stuck"})).is_error
        started = time.monotonic()
        res = await call(client, {**args, "timeout_s": 10})
        elapsed = time.monotonic() - started
        (model,) = res.structured_content["results"]
        assert (
            model["status"] == "timeout"
            and "no result within the call's 10 s limit: 0 of 1 groups scored" in model["error"]
        )
        assert elapsed < 10 + 15 and our_processes(res.structured_content["output_dir"]) == []
        assert not (await client.call_tool("rl_select_environment", {"name": "crashy"})).is_error
        # Broken after it was selected: it no longer imports -> an error with the traceback's end.
        crashy.write_text('raise ImportError("crashy import sentinel")\n' + BROKEN_AT_RUNTIME)
        os.utime(crashy, (time.time() + 5, time.time() + 5))
        res = await call(client, args)
    assert res.is_error
    text = res.content[0].text
    assert "crashy import sentinel" in text and "Traceback" in text
