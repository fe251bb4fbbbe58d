"""Streamed replies as OpenAI clients read them: the `openai` client's stream against the whole reply for
the same seed (chat and completions, n > 1, logprobs, usage), tool calls in the model's text streamed as
tool_calls, a max_tokens past the context clamped and said so, a client gone mid-stream freeing its
rows, and bad fields refused by name. The tiny model's real sampler behind uvicorn."""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import openai
import pytest

from tinker_atropos.backends.local import create_sampler, load_base_model
from tinker_atropos.inference_server import SamplerHolder, ServerHandle, build_app, serve_in_thread
from tinker_atropos.inference_server.app import CLAMPED_HEADER
from tinker_atropos.inference_server.engine import Generation, Token
from tinker_atropos.inference_server.replies import chat_reply
from tinker_atropos.inference_server.streaming import StreamHead, chat_stream
from tinker_atropos.models import ensure_model
from tinker_atropos.reply_cap import ReplyCap

MODEL = "tiny-chat"
MESSAGES = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def base():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ensure_model(MODEL)
    return load_base_model(MODEL, "cpu")


@pytest.fixture(scope="module")
def sampler(base):
    return create_sampler(base, None)


@pytest.fixture(scope="module")
def served(base, sampler) -> Iterator[ServerHandle]:
    cap = ReplyCap(base.model.config.max_position_embeddings, 64)  # as served_cap reads it from the folder
    handle = serve_in_thread(build_app(SamplerHolder(sampler), MODEL, base.tokenizer, cap), "127.0.0.1", 0)
    yield handle
    handle.stop()


@pytest.fixture
def client(served) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served.url}/v1", api_key="none", max_retries=0, timeout=60) as c:
        yield c


def test_a_streamed_chat_reply_equals_the_whole_one_for_the_same_seed(client) -> None:
    asked: dict[str, Any] = dict(model=MODEL, messages=MESSAGES, max_tokens=24, seed=7, n=2, logprobs=True)
    whole = client.chat.completions.create(**asked)
    chunks = list(client.chat.completions.create(**asked, stream=True, stream_options={"include_usage": True}))
    texts, finishes, logprobs = ["", ""], [None, None], [[], []]
    for chunk in chunks[:-1]:
        assert chunk.object == "chat.completion.chunk" and chunk.usage is None
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            finishes[choice.index] = choice.finish_reason or finishes[choice.index]
            logprobs[choice.index] += [e.logprob for e in (choice.logprobs.content if choice.logprobs else [])]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len(chunks) > 6, "the text came in pieces, not in one chunk at the end"
    assert [c.message.content for c in whole.choices] == texts
    assert [c.finish_reason for c in whole.choices] == finishes
    # the second request's prompt comes from the prefix cache: its float sums differ in the last bits
    for choice, streamed in zip(whole.choices, logprobs):
        assert [e.logprob for e in choice.logprobs.content] == pytest.approx(streamed, abs=1e-4)
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage


def test_a_streamed_completion_equals_the_whole_one_and_ends_with_done(served, client) -> None:
    asked: dict[str, Any] = dict(model=MODEL, prompt="Once upon", max_tokens=20, seed=3, stop=["e"], logprobs=0)
    whole = client.completions.create(**asked)
    chunks = list(client.completions.create(**asked, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    streamed_lps = [lp for c in chunks if c.choices[0].logprobs for lp in c.choices[0].logprobs.token_logprobs]
    assert streamed_lps == pytest.approx(whole.choices[0].logprobs.token_logprobs, abs=1e-4)
    assert "e" not in whole.choices[0].text or whole.choices[0].finish_reason == "length"
    with httpx.stream("POST", f"{served.url}/v1/completions", json={**asked, "stream": True}) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)


def test_a_max_tokens_past_the_context_is_clamped_and_said_so(served, base) -> None:
    context = base.model.config.max_position_embeddings
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 65536, "seed": 1, "stream": True}
    with httpx.stream("POST", f"{served.url}/v1/chat/completions", json=body, timeout=60) as resp:
        assert resp.status_code == 200
        note = resp.headers[CLAMPED_HEADER]
        list(resp.iter_lines())
    assert note.startswith("65536 -> 64 (") and f"context {context} tokens" in note and "reply cap 64" in note
    small = httpx.post(f"{served.url}/v1/chat/completions", json={**body, "stream": False, "max_tokens": 5})
    assert small.status_code == 200 and CLAMPED_HEADER not in small.headers


def test_a_client_gone_mid_stream_frees_its_rows_at_once(served, sampler) -> None:
    cancelled = httpx.get(f"{served.url}/health").json()["cancelled_requests"]
    # greedy, the tiny model never says its end: 2000 tokens would take it seconds
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 2000, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{served.url}/v1/chat/completions", json=body, timeout=60) as resp:
        lines = resp.iter_lines()
        while '"content": ""' in (line := next(lines)) or not line.startswith("data: {"):
            pass  # up to the first chunk of sampled text
        assert sampler.batcher.rows == 1
    gone = sampler.generated_tokens
    deadline = time.monotonic() + 5
    while sampler.batcher.rows and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sampler.batcher.rows == 0 and sampler.generated_tokens - gone < 200
    assert httpx.get(f"{served.url}/health").json()["cancelled_requests"] == cancelled + 1


def test_unknown_fields_are_ignored_and_a_bad_one_is_refused_by_name(served, client) -> None:
    extra = {"parallel_tool_calls": True, "reasoning_effort": "low", "some_vendor_field": {"x": 1}}
    reply = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3, extra_body=extra)
    assert reply.choices[0].message.role == "assistant"
    parts = [{"role": "user", "content": [{"type": "text", "text": "Say "}, {"type": "text", "text": "something."}]}]
    same = [client.chat.completions.create(model=MODEL, messages=m, max_tokens=6, seed=2) for m in (MESSAGES, parts)]
    assert same[0].choices[0].message.content == same[1].choices[0].message.content
    for bad, named in [({"temperature": -1}, "temperature"), ({"n": 0}, "n"), ({"stream": "sometimes"}, "stream")]:
        resp = httpx.post(f"{served.url}/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES, **bad})
        assert resp.status_code == 400, resp.text
        message = resp.json()["error"]["message"]
        assert message.startswith(f"invalid request: {named}:") and repr(str(bad[named])) in message, message


async def _told(tokens: list[int], logprobs: list[float]) -> AsyncIterator[Token | list[Generation]]:
    for token, logprob in zip(tokens, logprobs):
        yield Token(0, token, logprob)
    yield [Generation(tokens, logprobs, "stop")]


@pytest.mark.parametrize(
    "text",
    [
        'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "note.txt"}}\n</tool_call>',
        '<tool_call>{"name": "terminal", "arguments": {"command": "ls"}}</tool_call>\n',
        "No call here, only <tool_ words and an unclosed <tool_call> {",
    ],
)
def test_tool_calls_in_the_text_stream_as_the_whole_reply_gives_them(base, text: str) -> None:
    """The stream's logic on a reply the tiny model cannot write: the text's real tokens told one by one."""
    tok = base.tokenizer
    tokens = tok.encode(text, add_special_tokens=False)

    def finish(gens: list[Generation]):
        return gens, [chat_reply(tok.decode(g.tokens, skip_special_tokens=True), g.finish_reason, True) for g in gens]

    async def collect() -> list[dict[str, Any]]:
        chunks = chat_stream(
            _told(tokens, [0.0] * len(tokens)),
            StreamHead("id", MODEL),
            n=1,
            decode=lambda ids: tok.decode(ids, skip_special_tokens=True),
            stops=(),
            parse_tools=True,
            finish=finish,
            logprobs=None,
            usage=None,
        )
        return [json.loads(c.removeprefix("data: ")) async for c in chunks if c != "data: [DONE]\n\n"]

    chunks = anyio.run(collect)
    whole = chat_reply(text, "stop", True)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    content = "".join(d.get("content") or "" for d in deltas)
    calls = [call for d in deltas for call in d.get("tool_calls") or []]
    assert content == (whole.content or "")
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in whole.tool_calls or []
    ]
    assert chunks[-1]["choices"][0]["finish_reason"] == whole.finish_reason
    assert not any("<tool_call>" in (d.get("content") or "") for d in deltas) or whole.tool_calls is None
