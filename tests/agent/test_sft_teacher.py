"""Cross_entropy steps teach a cold model the environment's tool call. That model, served by the
product's own inference server as an earlier run's adapter, then teaches through the environment:
its rollouts are kept only where the reward passes with a well-formed tool call, the best of each
item. An endpoint that cannot be asked fails at once, by name, never echoing its key."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from agent_helpers import close_env, make_env
from test_sft_stage import free_port, run_config, stage
from tinker import types

from tinker_atropos.agent.loop import PROMPT_MASK
from tinker_atropos.agent.tool_calls import parse_tool_calls
from tinker_atropos.environments.tool_calculator import ToolCalculatorEnv
from tinker_atropos.run_files import RunFiles, read_jsonl
from tinker_atropos.sft.examples import Example, from_demonstration
from tinker_atropos.sft.settings import TeacherSettings
from tinker_atropos.sft.steps import batches, sft_step
from tinker_atropos.sft.teacher import TeacherUnavailable, teacher_server
from tinker_atropos.trainer.config import load_run_config

KEY = "sk-never-echoed-7f3a"


@dataclass
class Taught:
    adapter: str  # the final weights, as an earlier run leaves them
    share_before: float  # greedy first turns on the examples' prompts that hold a call
    share_after: float
    losses: list[float]


@pytest.fixture(scope="module")
def taught(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Taught:
    """tiny-chat, which never writes a call, after cross_entropy steps on two calculator demonstrations:
    the overfit test's subject and the teacher test's "earlier run" (trained once for both)."""
    from tinker_atropos.backends.local import LocalTrainingClient, load_base_model

    async def teach() -> Taught:
        env = make_env(ToolCalculatorEnv, "http://127.0.0.1:1", tiny_path, group_size=1)
        try:
            await env.setup()
            examples = [
                await from_demonstration(env, item, f"item {i}", 1.0) for i, item in enumerate(env.train_items[:2])
            ]
        finally:
            await close_env(env)
        assert all(isinstance(e, Example) for e in examples)
        folder = tmp_path_factory.mktemp("run-a")
        client = LocalTrainingClient(load_base_model("tiny-chat", "cpu"), rank=8, run_dir=folder, run_name="a", seed=0)

        async def share_with_a_call() -> float:
            sampler = await client.create_sampling_client_async(await client.save_weights_for_sampler_async("now"))
            calls = 0
            for e in examples:
                prompt = e.tokens[: next(i for i, m in enumerate(e.masks) if m != PROMPT_MASK)]
                reply = await sampler.sample_async(
                    types.ModelInput.from_ints(prompt), 1, types.SamplingParams(max_tokens=120, temperature=0.0)
                )
                calls += bool(
                    parse_tool_calls(env.tokenizer.decode(reply.sequences[0].tokens, skip_special_tokens=True)).calls
                )
            return calls / len(examples)

        before = await share_with_a_call()
        adam = types.AdamParams(learning_rate=3e-3)
        losses = [(await sft_step(client, batch, adam)).loss for batch in batches(examples, 2, 60)]  # type: ignore[arg-type]
        after = await share_with_a_call()
        return Taught(await client.save_weights_for_sampler_async("final"), before, after, losses)

    return asyncio.run(teach())


def test_sft_steps_teach_a_cold_model_the_tool_call_on_its_items(taught: Taught) -> None:
    """A tiny overfit run: its greedy first turn on each example's prompt becomes the calculator call."""
    assert taught.share_before == 0.0
    assert taught.losses[-1] < taught.losses[0] / 5
    assert taught.share_after == 1.0


def test_an_earlier_runs_adapter_teaches_through_the_environment(taught: Taught, tiny_path, tmp_path) -> None:
    teacher = {"adapter": taught.adapter, "samples_per_item": 2, "keep_per_item": 1, "temperature": 0.0}
    sft = {"sources": ["teacher"], "teacher": teacher, "items": 2, "min_score": 0.0}
    # a turn has room for the call (tiny-chat: a token a character)
    done = stage(run_config(tmp_path / "run-b", tiny_path, sft, max_turn_tokens=120), "--preview")
    assert done.returncode == 0, done.stderr[-3000:]
    files = RunFiles(tmp_path / "run-b")
    summary = json.loads(files.sft_summary.read_text())
    kept = summary["counts"]["teacher"]["kept"]
    assert kept == 2 and summary["counts"]["teacher"]["refused"] == 2  # the best of each item's two
    assert {r["reason"] for r in summary["refused"]} == {"not among the best 1 of its item"}
    examples = read_jsonl(files.sft_examples)
    assert all(e["source"] == "teacher" and e["tool_calls"] >= 1 for e in examples)
    assert "<tool_call>" in "".join(s["text"] for s in summary["example"]["spans"] if s["trained"])


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    """An OpenAI-compatible endpoint that refuses every key."""

    class Refuse(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


@pytest.mark.anyio
async def test_a_teacher_that_cannot_be_asked_fails_at_once_by_name(
    tiny_path, tmp_path, refusing_endpoint, monkeypatch
) -> None:
    cfg = load_run_config(run_config(tmp_path / "run", tiny_path, {"items": 1}))

    async def ask(**teacher: str) -> str:
        with pytest.raises(TeacherUnavailable) as refused:
            async with teacher_server(cfg, TeacherSettings(model="m", **teacher)):
                pass
        return str(refused.value)

    closed = f"http://127.0.0.1:{free_port()}/v1"
    assert f"the teacher at {closed} is unreachable" in await ask(base_url=closed)
    monkeypatch.setenv("TEACHER_KEY", KEY)
    said = await ask(base_url=refusing_endpoint, api_key_var="TEACHER_KEY")
    assert "refused the key (HTTP 401)" in said and KEY not in said
    assert "NO_SUCH_TEACHER_KEY is not set" in await ask(base_url=refusing_endpoint, api_key_var="NO_SUCH_TEACHER_KEY")


def test_the_stage_fails_on_an_unreachable_teacher_with_its_config_exit_code(tiny_path, tmp_path) -> None:
    teacher = {"base_url": f"http://127.0.0.1:{free_port()}/v1", "model": "m"}
    done = stage(run_config(tmp_path / "run", tiny_path, {"sources": ["teacher"], "teacher": teacher}), "--preview")
    assert done.returncode == 2 and "is unreachable" in done.stderr
