"""Exact tokens for episodes run by a harness the product cannot see inside (Hermes): the inference server
records what it sampled under each episode's api key, the environment takes the records and builds its
sequences from them, and the trainer's own datums train exactly the ids the sampler gave, with their
logprobs. The tiny model's real sampler behind uvicorn, the `openai` client as Hermes calls it
(streamed, with tools), records taken over HTTP."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import numpy as np
import openai
import pytest
from tinker import types

from tinker_atropos.backends.local import create_sampler, load_base_model
from tinker_atropos.hermes_harness import sequences as seqs
from tinker_atropos.hermes_harness.sequences import EpisodeCall, EpisodeEvicted, episode_sequences, take_episode
from tinker_atropos.inference_server import SamplerHolder, ServerHandle, build_app, episode_log, serve_in_thread
from tinker_atropos.inference_server.engine import Generation
from tinker_atropos.inference_server.episode_log import EpisodeLog, Weights
from tinker_atropos.models import ensure_model
from tinker_atropos.trainer.batches import groups_to_datums

MODEL = "tiny-chat"
TERMINAL = {
    "type": "function",
    "function": {
        "name": "terminal",
        "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    },
}
TOOL_CALL = '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>'
SYSTEM = {"role": "system", "content": "You are a careful agent."}
USER = {"role": "user", "content": "List the files."}


class Witness:
    """The real sampler, each reply it gives kept: what the records and the trained tokens must equal.
    A scripted reply (a text the tiny model cannot write, such as a tool call) is given as the ids
    sampled, with the real model's logprobs of them, told token by token as the local sampler tells."""

    streams_tokens = True
    path = None

    def __init__(self, inner: Any, tokenizer: Any) -> None:
        self.inner = inner
        self.tok = tokenizer
        self.max_positions = inner.max_positions
        self.script: list[str] = []
        self.given: list[tuple[list[int], list[tuple[list[int], list[float]]]]] = []  # (prompt, [(ids, logprobs)])

    async def sample_async(self, prompt, num_samples, params, on_token=None) -> types.SampleResponse:
        if self.script:
            ids = [*self.tok.encode(self.script.pop(0), add_special_tokens=False), self.tok.eos_token_id]
            scored = await self.inner.compute_logprobs_async(types.ModelInput.from_ints(prompt.to_ints() + ids))
            lps = np.asarray(scored[-len(ids) :], np.float32)
            for token, lp in zip(ids, lps.tolist()):
                if on_token is not None:
                    on_token(0, token, lp)
            seq = types.SampledSequence("stop", uuid.uuid4().hex, np.asarray(ids, np.int32), lps)
            response = types.SampleResponse(sequences=[seq])
        else:
            response = await self.inner.sample_async(prompt, num_samples, params, on_token=on_token)
        self.given.append((prompt.to_ints(), [(list(s.tokens), list(s.logprobs)) for s in response.sequences]))
        return response

    async def compute_logprobs_async(self, prompt: types.ModelInput, from_position: int = 0):
        return await self.inner.compute_logprobs_async(prompt, from_position)


@pytest.fixture(scope="module")
def base():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ensure_model(MODEL)
    return load_base_model(MODEL, "cpu")


@pytest.fixture(scope="module")
def served(base) -> Iterator[tuple[SamplerHolder, Witness, ServerHandle]]:
    witness = Witness(create_sampler(base, None), base.tokenizer)
    holder = SamplerHolder(witness)  # type: ignore[arg-type]
    handle = serve_in_thread(build_app(holder, MODEL, base.tokenizer), "127.0.0.1", 0)
    yield holder, witness, handle
    handle.stop()


def key() -> str:
    return f"episode-{uuid.uuid4().hex}"


def client(url: str, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=60)


def taken(url: str, episode: str) -> list[EpisodeCall]:
    async def take() -> list[EpisodeCall]:
        async with httpx.AsyncClient(timeout=30) as http:
            return await take_episode(http, f"{url}/v1", episode)

    return anyio.run(take)


def streamed_reply(ai: openai.OpenAI, messages: list[dict[str, Any]], **asked: Any) -> dict[str, Any]:
    """A streamed chat reply put together as Hermes does: its content and its tool calls."""
    content, calls = "", {}
    for chunk in ai.chat.completions.create(model=MODEL, messages=messages, stream=True, **asked):
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for part in choice.delta.tool_calls or []:
                call = calls.setdefault(
                    part.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                call["id"] += part.id or ""
                call["function"]["name"] += part.function.name or ""
                call["function"]["arguments"] += part.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    return {**message, "tool_calls": [calls[i] for i in sorted(calls)]} if calls else message


def trained(group: dict[str, Any]) -> list[tuple[list[int], list[float], list[int]]]:
    """Each datum the trainer makes of `group`: the targets with a nonzero weight, their logprobs, all tokens."""
    out = []
    for datum in groups_to_datums([group]).datums:
        targets = datum.loss_fn_inputs["target_tokens"].to_numpy()
        weight = datum.loss_fn_inputs["advantages"].to_numpy() != 0
        logprobs = datum.loss_fn_inputs["logprobs"].to_numpy()
        tokens = [*datum.model_input.to_ints(), int(targets[-1])]
        out.append((targets[weight].tolist(), logprobs[weight].tolist(), tokens))
    return out


def group_of(built: seqs.EpisodeSequences) -> dict[str, Any]:
    """The episode's sequences as a ScoredDataGroup's entries, beside a copy scored lower (the
    advantages are then nonzero on every trained position)."""
    rows = built.sequences * 2
    scores = [1.0] * len(built.sequences) + [0.0] * len(built.sequences)
    return {
        "tokens": [r.tokens for r in rows],
        "masks": [r.masks for r in rows],
        "inference_logprobs": [r.logprobs for r in rows],
        "scores": scores,
    }


def as_f32(values: list[float]) -> list[float]:
    return np.asarray(values, np.float32).tolist()


def test_a_hermes_episode_trains_exactly_the_tokens_the_server_sampled(served) -> None:
    holder, witness, handle = served
    episode, before = key(), len(witness.given)
    messages = [SYSTEM, USER]
    with client(handle.url, episode) as ai:
        witness.script.append(TOOL_CALL)
        reply = streamed_reply(ai, messages, tools=[TERMINAL], max_tokens=200)
        assert [c["function"]["name"] for c in reply.get("tool_calls", [])] == ["terminal"], reply
        messages += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"], "content": "notes.txt"}]
        second = ai.chat.completions.create(
            model=MODEL,
            messages=messages,
            tools=[TERMINAL],
            max_tokens=12,
            seed=5,
            logprobs=True,
            extra_body={"return_token_ids": True},
        )
    given = witness.given[before:]
    assert len(given) == 2

    calls = taken(handle.url, episode)
    assert [(c.endpoint, c.streamed, c.n) for c in calls] == [("chat", True, 1), ("chat", False, 1)]
    assert [c.choices[0].finish_reason for c in calls] == ["tool_calls", second.choices[0].finish_reason]
    assert {c.weights_version for c in calls} == {holder.version}
    for call, (prompt, [(ids, lps)]) in zip(calls, given):
        assert call.prompt_ids == prompt  # as the sampler was fed it
        assert call.choices[0].completion_ids == ids and call.choices[0].logprobs == lps
        assert call.choices[0].returned_tokens == len(ids)
    assert calls[0].choices[0].completion_ids[-1] == witness.tok.eos_token_id  # the end-of-turn token is kept
    assert second.choices[0].model_extra["token_ids"] == calls[1].choices[0].completion_ids
    assert [e.logprob for e in second.choices[0].logprobs.content] == calls[1].choices[0].logprobs
    assert taken(handle.url, episode) == []  # taken once: the server dropped them

    built = episode_sequences(calls)
    assert built.refused is None and built.merged and built.calls == 2
    [(targets, logprobs, tokens), _] = trained(group_of(built))
    assert targets == [t for _, [(ids, _)] in given for t in ids]
    assert logprobs == as_f32([lp for _, [(_, lps)] in given for lp in lps])
    second_prompt = given[1][0]
    assert tokens[: len(second_prompt)] == second_prompt  # one sequence: the second prompt extends the first call
    assert tokens == second_prompt + given[1][1][0][0]


def test_a_rewritten_history_is_two_sequences_each_trained_on_its_own_reply(served) -> None:
    _, witness, handle = served
    episode, before = key(), len(witness.given)
    with client(handle.url, episode) as ai:
        first = ai.chat.completions.create(model=MODEL, messages=[SYSTEM, USER], max_tokens=6, seed=1)
        rewritten = [{"role": "system", "content": "Earlier turns, summarised."}, USER]
        rewritten += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "Again."}]
        streamed_reply(ai, rewritten, max_tokens=6, seed=2)
    given = witness.given[before:]

    built = episode_sequences(taken(handle.url, episode))
    assert built.refused is None and not built.merged and len(built.sequences) == 2
    for (targets, logprobs, tokens), (prompt, [(ids, lps)]) in zip(trained(group_of(built)), given):
        assert tokens == prompt + ids and targets == ids and logprobs == as_f32(lps)


def test_ids_past_a_stop_string_are_recorded_and_trained_only_where_the_sequence_ends(served) -> None:
    _, witness, handle = served
    episode = key()
    with client(handle.url, episode) as ai:
        witness.script.append("Done. END of it")
        reply = ai.chat.completions.create(model=MODEL, messages=[USER], max_tokens=40, stop=["END"])
        assert reply.choices[0].message.content == "Done. "
        follow = [USER, reply.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "More."}]
        ai.chat.completions.create(model=MODEL, messages=follow, max_tokens=4, seed=3)
    calls = taken(handle.url, episode)
    choice = calls[0].choices[0]
    sampled = [*witness.tok.encode("Done. END of it", add_special_tokens=False), witness.tok.eos_token_id]
    assert choice.completion_ids == sampled  # everything the sampler drew
    assert choice.returned_tokens == len("Done. E")  # up to the token where the stop string starts
    built = episode_sequences(calls)
    assert built.merged  # the next prompt holds the reply as it was returned
    [(targets, _, _), _] = trained(group_of(built))
    assert targets == sampled[: choice.returned_tokens] + calls[1].choices[0].completion_ids
    alone = episode_sequences(calls[:1])
    assert alone.sequences[0].tokens[-len(sampled) :] == sampled  # the last reply keeps all it sampled


def test_unmatched_episodes_are_refused_with_their_reason_a_swap_kept_and_said(served) -> None:
    holder, _, handle = served
    many, swapped = key(), key()
    with client(handle.url, many) as ai:
        ai.chat.completions.create(model=MODEL, messages=[USER], max_tokens=3, n=2)
    refused = episode_sequences(taken(handle.url, many))
    assert refused.refused == seqs.MANY_CHOICES and "n=2" in refused.detail and not refused.sequences
    with client(handle.url, swapped) as ai:
        ai.chat.completions.create(model=MODEL, messages=[USER], max_tokens=3)
        holder.swap(holder.current()[0], label="step-000001")  # new weights for every later request
        ai.completions.create(model=MODEL, prompt="Once", max_tokens=3)
    calls = taken(handle.url, swapped)
    assert [c.endpoint for c in calls] == ["chat", "completions"] and calls[1].weights_label == "step-000001"
    kept = episode_sequences(calls)  # each id keeps the logprob of the weights that drew it
    assert kept.refused is None and kept.swapped and len(kept.sequences) == 2
    assert not episode_sequences(calls[:1]).swapped
    assert episode_sequences([]).refused == seqs.NO_CALLS


def test_a_client_gone_mid_stream_leaves_a_cancelled_call_that_is_not_trained(served) -> None:
    _, _, handle = served
    episode = key()
    body = {"model": MODEL, "messages": [USER], "max_tokens": 2000, "temperature": 0, "stream": True}
    auth = {"authorization": f"Bearer {episode}"}
    with httpx.stream("POST", f"{handle.url}/v1/chat/completions", json=body, headers=auth, timeout=60) as resp:
        lines = resp.iter_lines()
        while '"content": ""' in (line := next(lines)) or not line.startswith("data: {"):
            pass  # up to the first chunk of sampled text
    deadline = time.monotonic() + 10
    while not httpx.get(f"{handle.url}/episodes/{episode}").json()["calls"] and time.monotonic() < deadline:
        time.sleep(0.02)
    calls = taken(handle.url, episode)
    [choice] = calls[0].choices
    assert choice.finish_reason == episode_log.CANCELLED == seqs.CANCELLED and 0 < len(choice.completion_ids) < 2000
    built = episode_sequences(calls)
    assert built.refused == seqs.NO_CALLS and built.cancelled_calls == 1


def test_requests_without_an_episode_key_are_not_recorded(served) -> None:
    _, _, handle = served
    held = httpx.get(f"{handle.url}/health").json()["episodes"]
    with client(handle.url, "sk-local") as ai:
        ai.chat.completions.create(model=MODEL, messages=[USER], max_tokens=3)
        ai.completions.create(model=MODEL, prompt="Once", max_tokens=3, stream=True).close()
    assert httpx.get(f"{handle.url}/health").json()["episodes"] == held
    bad = httpx.post(
        f"{handle.url}/v1/chat/completions",
        json={"model": MODEL, "messages": [USER], "max_tokens": 2},
        headers={"authorization": "Bearer episode-no/slashes"},
    )
    assert bad.status_code == 400 and "'episode-no/slashes'" in bad.json()["error"]["message"]


def test_the_log_is_bounded_and_an_evicted_episode_is_said_so(base, served) -> None:
    log = EpisodeLog(max_keys=2, max_tokens=10_000)
    weights = Weights(1, None, None)
    reply = Generation([7, 8, 9], [-0.5, -0.25, -1.0], "stop")

    def call(name: str, prompt: list[int]) -> None:
        recorder = log.recorder(name, "chat", [prompt], 1, weights, False)
        assert recorder is not None
        recorder.finished([reply], [reply], ["stop"])

    call("episode-a", [1, 2])
    call("episode-a", [1, 2, 7, 8, 9, 3])  # extends the first call: stored as its new id only
    assert log.tokens == 2 + 3 + 1 + 3
    assert [c["prompt_ids"] for c in log.answer("episode-a")["calls"]] == [[1, 2], [1, 2, 7, 8, 9, 3]]
    call("episode-b", [4])
    call("episode-c", [5])  # a third key: the least recently written goes
    assert log.evicted == 1 and log.stats()["keys"] == 2
    call("episode-a", [1, 2])
    gone = log.answer("episode-a")
    assert gone["evicted"] and gone["calls"] == []  # never a partial episode
    assert log.drop("episode-b") == 1 and log.answer("episode-b") == {"key": "episode-b", "calls": [], "evicted": False}

    _, witness, _ = served
    small = serve_in_thread(
        build_app(SamplerHolder(witness), MODEL, base.tokenizer, episodes=EpisodeLog(max_keys=1)), "127.0.0.1", 0
    )  # type: ignore[arg-type]
    try:
        first, second = key(), key()
        for episode in (first, second):
            with client(small.url, episode) as ai:
                ai.chat.completions.create(model=MODEL, messages=[USER], max_tokens=2)
        held = httpx.get(f"{small.url}/health").json()["episodes"]
        assert (held["keys"], held["evicted"]) == (1, 1)
        with pytest.raises(EpisodeEvicted, match=first):
            taken(small.url, first)
        assert len(taken(small.url, second)) == 1
    finally:
        small.stop()
