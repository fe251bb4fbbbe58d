"""The inference server, for real: the tiny model's local sampler behind uvicorn, driven by
atroposlib's own ServerManager (sglang and vllm types, managed_server included), the openai
client and plain HTTP; sampler swaps; the standalone process."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import torch
import warm_children
import yaml
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from numerics import logprob_tol
from tinker import types

from tinker_atropos.backends.local import create_sampler, load_base_model
from tinker_atropos.http_tls import shared_tls
from tinker_atropos.inference_server import (
    PortBindError,
    SamplerHolder,
    ServerHandle,
    build_app,
    serve_in_thread,
)
from tinker_atropos.models import ensure_model
from tinker_atropos.reply_cap import ReplyCap

ROOT = Path(__file__).resolve().parents[1]
MODEL = "tiny-chat"


@pytest.fixture(scope="module")
def base():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ensure_model(MODEL)
    return load_base_model(MODEL, "cpu")


@pytest.fixture(scope="module")
def sampler(base):
    return create_sampler(base, None)


@pytest.fixture(scope="module")
def other_sampler(base):
    """A second real model: the same architecture with perturbed weights."""
    s = create_sampler(base, None)
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        for p in s.model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.5)
    return s


@pytest.fixture(scope="module")
def served(base, sampler) -> Iterator[tuple[SamplerHolder, ServerHandle]]:
    holder = SamplerHolder(sampler)
    handle = serve_in_thread(build_app(holder, MODEL, base.tokenizer), "127.0.0.1", 0)
    yield holder, handle
    handle.stop()


@pytest.fixture
def http(served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=served[1].url, timeout=60) as client:
        yield client


def manager(url: str, server_type: str) -> ServerManager:
    cfg = APIServerConfig(
        model_name=MODEL,
        base_url=f"{url}/v1",
        api_key="local",
        server_type=server_type,
        tokenizer_name=str(ensure_model(MODEL)),
        timeout=60,
    )
    return ServerManager([cfg])


async def close(mgr: ServerManager) -> None:
    """Stop the health-check task and close the HTTP client in the loop that opened them."""
    for server in mgr.servers:
        if server.check_task is not None:
            server.check_task.cancel()
        await server.openai.close()


def recomputed(http: httpx.Client, tokens: list[int]) -> list[float | None]:
    return http.post("/logprobs", json={"input_ids": tokens}).json()["logprobs"]


def lp_tol(sampler, logprobs: list) -> float:
    """The tiny model's logprobs computed twice (a decode with its KV cache, a batch, another kernel):
    numerics.logprob_tol at these logprobs' size."""
    return logprob_tol(sampler.model.config, len(logprobs) + 32, max(abs(x) for x in logprobs if x is not None) + 1.0)


@pytest.mark.kernels
@pytest.mark.parametrize("server_type", ["sglang", "vllm"])
@pytest.mark.anyio
async def test_server_manager_tokens_and_logprobs(served, http, sampler, server_type: str) -> None:
    mgr = manager(served[1].url, server_type)
    try:
        prompt = "Repeat the letter a"
        prompt_tokens, outs, lps, reasons = await mgr.tokens_and_logprobs_completion(
            prompt=prompt, n=3, max_tokens=6, temperature=1.0
        )
    finally:
        await close(mgr)
    assert prompt_tokens == list(mgr.servers[0].tokenizer.encode(prompt))
    assert len(outs) == len(lps) == len(reasons) == 3
    for out, lp, reason in zip(outs, lps, reasons):
        assert 1 <= len(out) <= 6 and len(lp) == len(out)
        assert (reason["type"] if isinstance(reason, dict) else reason) in ("stop", "length")
        # The logprobs the sampler reported are the model's: a fresh forward pass agrees.
        again = recomputed(http, prompt_tokens + out)[len(prompt_tokens) :]
        assert again == pytest.approx(lp, abs=lp_tol(sampler, lp))


@pytest.mark.kernels
@pytest.mark.anyio
async def test_vllm_get_logprobs_uses_prompt_logprobs(served, http, sampler) -> None:
    mgr = manager(served[1].url, "vllm")
    tokens = [72, 101, 108, 108, 111, 33]
    try:
        payload = await mgr.get_logprobs(input_ids=tokens)
    finally:
        await close(mgr)
    assert payload["prompt_tokens"] == tokens
    assert payload["prompt_topk_token_ids"][0] == []  # the first token has no context
    assert payload["prompt_topk_token_ids"][1:] == [[t] for t in tokens[1:]]
    want = recomputed(http, tokens)[1:]
    assert [lp[0] for lp in payload["prompt_topk_logprobs"][1:]] == pytest.approx(want, abs=lp_tol(sampler, want))


@pytest.mark.kernels
@pytest.mark.parametrize("server_type", ["sglang", "vllm"])
@pytest.mark.anyio
async def test_managed_server_tracks_tokens_masks_and_logprobs(served, http, sampler, server_type: str) -> None:
    mgr = manager(served[1].url, server_type)
    messages = [{"role": "user", "content": "Repeat the letter b 4 times."}]
    try:
        async with mgr.managed_server() as managed:
            completion = await managed.chat_completion(messages=messages, n=4, max_tokens=5, temperature=1.0)
            nodes = managed.get_state()["nodes"]
    finally:
        await close(mgr)
    tok = mgr.servers[0].tokenizer
    prompt = tok.encode(tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    assert len(completion.choices) == len(nodes) == 4
    for node, choice in zip(nodes, completion.choices):
        n_prompt = len(prompt)
        assert node.tokens[:n_prompt] == prompt
        assert node.masked_tokens[:n_prompt] == [-100] * n_prompt
        completion_ids = node.tokens[n_prompt:]
        assert node.masked_tokens[n_prompt:] == completion_ids and 1 <= len(completion_ids) <= 5
        assert node.logprobs[:n_prompt] == [1.0] * n_prompt
        sampled = node.logprobs[n_prompt:]
        assert recomputed(http, node.tokens)[n_prompt:] == pytest.approx(sampled, abs=lp_tol(sampler, sampled))
        assert choice.message.content == tok.decode(completion_ids, skip_special_tokens=True)


@pytest.mark.anyio
async def test_server_manager_chat_and_completion_through_openai_endpoints(served) -> None:
    mgr = manager(served[1].url, "sglang")
    try:
        chat = await mgr.chat_completion(messages=[{"role": "user", "content": "hi"}], n=2, max_tokens=4)
        comp = await mgr.completion(prompt="abc", n=3, max_tokens=4)
    finally:
        await close(mgr)
    assert len(chat.choices) == 2 and len(comp.choices) == 3
    assert all(c.finish_reason in ("stop", "length") for c in [*chat.choices, *comp.choices])


def test_openai_client_completions_with_logprobs_and_seed(served) -> None:
    client = openai.OpenAI(base_url=f"{served[1].url}/v1", api_key="local")
    assert [m.id for m in client.models.list().data] == [MODEL]
    kwargs = dict(model=MODEL, prompt="The letter", max_tokens=8, n=2, logprobs=1)
    first = client.completions.create(seed=7, **kwargs)
    again = client.completions.create(seed=7, **kwargs)
    other = client.completions.create(seed=8, **kwargs)
    assert [c.text for c in first.choices] == [c.text for c in again.choices]
    assert [c.text for c in first.choices] != [c.text for c in other.choices]
    for choice in first.choices:
        lp = choice.logprobs
        assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) >= 1
        assert all(x <= 0 for x in lp.token_logprobs)
    assert first.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in first.choices)


def test_openai_client_chat_with_logprobs_stop_and_greedy(served) -> None:
    client = openai.OpenAI(base_url=f"{served[1].url}/v1", api_key="local")
    msgs = [{"role": "user", "content": "Say something."}]
    greedy = [
        client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=10, temperature=0.0) for _ in range(2)
    ]
    assert greedy[0].choices[0].message.content == greedy[1].choices[0].message.content
    full = client.chat.completions.create(
        model=MODEL, messages=msgs, max_tokens=10, temperature=0.0, logprobs=True, top_logprobs=1
    )
    content = full.choices[0].logprobs.content
    assert len(content) == full.usage.completion_tokens
    text = full.choices[0].message.content
    assert len(text) >= 3
    stop = text[2]
    cut = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=10, temperature=0.0, stop=[stop])
    assert cut.choices[0].message.content == text[: text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_raw_sglang_and_vllm_generate_shapes(http) -> None:
    sg = http.post(
        "/generate",
        json={
            "input_ids": [[97, 98], [99, 100, 101]],
            "return_logprob": True,
            "sampling_params": {"max_new_tokens": 3, "n": 2, "temperature": 1.0},
        },
    )
    assert sg.status_code == 200 and len(sg.json()) == 4
    meta = sg.json()[2]["meta_info"]
    assert meta["prompt_tokens"] == 3 and meta["finish_reason"]["type"] in ("stop", "length")
    assert [t for _, t, _ in meta["output_token_logprobs"]] == sg.json()[2]["output_ids"]
    single = http.post("/generate", json={"text": "ab", "sampling_params": {"max_new_tokens": 2}}).json()
    assert isinstance(single, dict) and "output_token_logprobs" not in single["meta_info"]
    vl = http.post("/generate", json={"prompt": "ab", "max_tokens": 2, "n": 2, "logprobs": 0}).json()
    assert len(vl["text"]) == len(vl["finish_reasons"]) == len(vl["logprobs"]) == 2
    assert vl["prompt_token_ids"] == [97, 98]


@pytest.mark.parametrize("shape", ["vllm", "sglang"])
def test_generate_stops_at_stop_token_ids(http, base, shape: str) -> None:
    """Each /generate shape's `stop_token_ids` ends a sample at that token, kept as sampled (they
    were once decoded as a list of lists: every request that named one was a 400)."""

    def greedy(stop_ids: list[int]) -> tuple[list[int], str]:
        if shape == "vllm":
            body = {"prompt": {"prompt_token_ids": [97, 98]}, "max_tokens": 8, "temperature": 0.0}
            resp = http.post("/generate", json={**body, "stop_token_ids": stop_ids})
            assert resp.status_code == 200, resp.text
            return resp.json()["token_ids"][0], resp.json()["finish_reasons"][0]
        params = {"max_new_tokens": 8, "temperature": 0.0, "stop_token_ids": stop_ids}
        resp = http.post("/generate", json={"input_ids": [97, 98], "sampling_params": params})
        assert resp.status_code == 200, resp.text
        return resp.json()["output_ids"], resp.json()["meta_info"]["finish_reason"]["type"]

    full, _ = greedy([])
    text = base.tokenizer.decode
    # the first token whose text the reply before it does not hold: the reply stops there
    k = next(i for i in range(1, len(full)) if text([full[i]]) not in text(full[:i]))
    assert greedy([full[k]]) == (full[: k + 1], "stop")


def test_tokens_generate_answers_as_vllm_with_each_token_id_and_its_logprob(http, sampler) -> None:
    """/inference/v1/generate as verifiers 0.4.0's TrainClient calls it (unknown sampling keys ignored)."""
    prompt = [97, 98, 99]
    params = {"temperature": 1.0, "max_tokens": 5, "logprobs": 1, "skip_special_tokens": False, "n": 2, "repetition": 1}
    resp = http.post("/inference/v1/generate", json={"model": MODEL, "token_ids": prompt, "sampling_params": params})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["request_id"] and out["prompt_token_ids"] == prompt and len(out["choices"]) == 2
    for i, choice in enumerate(out["choices"]):
        ids, content = choice["token_ids"], choice["logprobs"]["content"]
        assert choice["index"] == i and choice["finish_reason"] in ("stop", "length") and 1 <= len(ids) <= 5
        assert [c["token"] for c in content] == [f"token_id:{t}" for t in ids]
        sampled = [c["logprob"] for c in content]
        assert recomputed(http, prompt + ids)[len(prompt) :] == pytest.approx(sampled, abs=lp_tol(sampler, sampled))
    assert out["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": sum(len(c["token_ids"]) for c in out["choices"]),
        "total_tokens": 3 + sum(len(c["token_ids"]) for c in out["choices"]),
    }
    assert "max_model_len" not in http.get("/v1/models").json()["data"][0]  # no cap given: unknown


def test_the_models_context_is_listed_and_caps_tokens_generate(base, sampler) -> None:
    handle = serve_in_thread(build_app(SamplerHolder(sampler), MODEL, base.tokenizer, ReplyCap(64, 3)), "127.0.0.1", 0)
    try:
        with httpx.Client(base_url=handle.url, timeout=60) as http:
            assert http.get("/v1/models").json()["data"][0]["max_model_len"] == 64
            body = {"token_ids": [97, 98], "sampling_params": {"max_tokens": 100}}
            ids = http.post("/inference/v1/generate", json=body).json()["choices"][0]["token_ids"]
    finally:
        handle.stop()
    assert 1 <= len(ids) <= 3  # asked past the context: the product's cap


def test_bad_requests_are_400_with_a_message(http) -> None:
    for path, body in [
        ("/generate", {"neither": 1}),
        ("/inference/v1/generate", {"token_ids": []}),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "echo": True}),
        ("/v1/chat/completions", {"model": MODEL, "messages": []}),
        ("/v1/completions", {"model": MODEL, "prompt": "x", "top_p": 2}),
        ("/logprobs", {}),
    ]:
        resp = http.post(path, json=body)
        assert resp.status_code == 400, (path, resp.text)
        assert resp.json()["error"]["message"]


@pytest.mark.kernels
def test_health_waits_for_the_first_sampler_and_swap_changes_outputs(base, sampler, other_sampler) -> None:
    holder = SamplerHolder()
    handle = serve_in_thread(build_app(holder, MODEL, base.tokenizer), "127.0.0.1", 0)
    try:
        with httpx.Client(base_url=handle.url, timeout=60) as http:
            assert http.get("/health").status_code == 503
            assert http.post("/logprobs", json={"input_ids": [1, 2]}).status_code == 503
            holder.swap(sampler)
            health = http.get("/health").json()
            assert (health["status"], health["sampler"], health["generated_tokens"]) == (
                "ok",
                None,
                sampler.generated_tokens,
            )
            holder.relabel("final")
            assert http.get("/health").json()["sampler"] == "final"
            body = {"input_ids": [97, 98, 99, 100]}
            before = http.post("/logprobs", json=body).json()
            holder.swap(other_sampler)
            after = http.post("/logprobs", json=body).json()
    finally:
        handle.stop()
    assert after["sampler_version"] == before["sampler_version"] + 1
    # another model: its logprobs differ by more than rounding could make them
    assert after["logprobs"][1:] != pytest.approx(before["logprobs"][1:], abs=10 * lp_tol(sampler, before["logprobs"]))


class GatedSampler:
    """A real sampler that holds each call until the test opens the gate."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.gate = threading.Event()

    async def sample_async(self, prompt, num_samples, sampling_params):
        return await self.inner.sample_async(prompt, num_samples, sampling_params)

    async def compute_logprobs_async(self, prompt: types.ModelInput):
        self.entered.set()
        await asyncio.to_thread(self.gate.wait, 30)
        return await self.inner.compute_logprobs_async(prompt)


@pytest.mark.kernels
def test_a_request_in_flight_finishes_on_the_sampler_it_started_with(base, sampler, other_sampler) -> None:
    gated = GatedSampler(sampler)
    holder = SamplerHolder(gated)
    handle = serve_in_thread(build_app(holder, MODEL, base.tokenizer), "127.0.0.1", 0)
    body = {"input_ids": [97, 98, 99, 100]}
    result: dict = {}
    try:
        with httpx.Client(base_url=handle.url, timeout=60) as http:
            worker = threading.Thread(target=lambda: result.update(http.post("/logprobs", json=body).json()))
            worker.start()
            assert gated.entered.wait(30)
            holder.swap(other_sampler)
            # The server loop is not blocked by the held call: new requests use the new sampler.
            new = http.post("/logprobs", json=body).json()
            gated.gate.set()
            worker.join(30)
    finally:
        gated.gate.set()
        handle.stop()
    assert result["sampler_version"] == 1 and new["sampler_version"] == 2
    direct = sampler.compute_logprobs(types.ModelInput.from_ints(body["input_ids"]))
    tol = lp_tol(sampler, direct)
    assert result["logprobs"] == pytest.approx(direct, abs=tol)  # one model, maybe another batch shape
    assert new["logprobs"][1:] != pytest.approx(result["logprobs"][1:], abs=10 * tol)  # another model


def decoding(http: httpx.Client) -> tuple[int, int]:
    """(rows decoding now, tokens generated so far) as /health says."""
    health = http.get("/health").json()
    return health["decoding"]["rows"], health["generated_tokens"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_a_client_that_gives_up_frees_its_rows_within_a_second(served, http, path: str) -> None:
    # greedy on the tiny model runs to its max_tokens: 8 rows of 4000 tokens take seconds
    ask = {"prompt": "hello"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    body = {**ask, "max_tokens": 4000, "n": 8, "temperature": 0.0}
    gave_up: list[BaseException] = []

    def impatient() -> None:
        try:
            httpx.post(served[1].url + path, json=body, timeout=1.0)
        except httpx.TimeoutException as exc:
            gave_up.append(exc)

    before = http.get("/health").json()["cancelled_requests"]
    client = threading.Thread(target=impatient)
    client.start()
    deadline = time.monotonic() + 5
    while decoding(http)[0] < 8:  # its rows are in the batch
        assert time.monotonic() < deadline, "the request never started decoding"
        time.sleep(0.02)
    client.join(10)
    assert gave_up, "the client got its answer before its timeout: ask for more tokens"
    left = time.monotonic()
    while decoding(http)[0]:
        assert time.monotonic() - left < 1.0, "the abandoned request still decodes a second after its client left"
        time.sleep(0.02)
    _, generated = decoding(http)
    time.sleep(0.3)
    assert decoding(http) == (0, generated)  # nothing decodes for nobody
    assert http.get("/health").json()["cancelled_requests"] == before + 1
    # the next request is served at once, not after the abandoned one's 32000 tokens
    started = time.monotonic()
    http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 8, "temperature": 0.0}).raise_for_status()
    assert time.monotonic() - started < 1.0


def test_serve_in_thread_reports_a_taken_port(base) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(PortBindError, match=f"127.0.0.1:{port}"):
            serve_in_thread(build_app(SamplerHolder(), MODEL, base.tokenizer), "127.0.0.1", port)


def standalone_config(tmp_path: Path, port: int, api: int, model: str = MODEL) -> Path:
    config = {
        "env": {"tokenizer_name": str(ensure_model(model))},
        "openai": [{"model_name": model, "base_url": f"http://127.0.0.1:{port}/v1", "server_type": "sglang"}],
        "trainer": {
            "backend": "local",
            "base_model": model,
            "total_steps": 1,
            "device": "cpu",
            "api_url": f"http://127.0.0.1:{api}",
            "inference_port": port,
            "run_dir": str(tmp_path),
        },
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def standalone(config: Path, log: Path, *extra: str) -> warm_children.Forked | subprocess.Popen[bytes]:
    """The server forked warm, as the server's inference test forks it; its stdout in `log`.stdout."""
    with log.open("wb") as err, log.with_suffix(".stdout").open("wb") as out:
        return warm_children.start(
            [sys.executable, "-m", "tinker_atropos.inference_server", "--config", str(config), *extra],
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            stdout=out.fileno(),
            stderr=err.fileno(),
            cwd=ROOT,
        )


def wait_healthy(proc: warm_children.Forked | subprocess.Popen[bytes], url: str, log: Path, timeout_s: float) -> None:
    """Until `url`/health answers 200; the server's log on its exit or at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, log.read_text()
        try:
            if httpx.get(f"{url}/health", timeout=2, verify=shared_tls()).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)


def test_standalone_serves_the_base_model_and_exits_cleanly_on_sigterm(tmp_path: Path, free_port) -> None:
    port = free_port()
    log = tmp_path / "server.log"
    proc = standalone(standalone_config(tmp_path, port, free_port()), log)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}", log, 60)
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            timeout=30,
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3},
        )
        assert reply.status_code == 200 and reply.json()["model"] == MODEL
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert log.with_suffix(".stdout").read_bytes() == b""  # logs go to stderr only
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize(("case", "code"), [("port_taken", 5), ("bad_adapter", 3)])
def test_standalone_exit_codes(tmp_path: Path, free_port, case: str, code: int) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1] if case == "port_taken" else free_port()
        extra = ("--adapter", str(tmp_path / "no-such-adapter")) if case == "bad_adapter" else ()
        log = tmp_path / "server.log"
        proc = standalone(standalone_config(tmp_path, port, free_port()), log, *extra)
        try:
            assert proc.wait(90) == code, log.read_text()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert ("cannot bind" if case == "port_taken" else "backend unavailable") in log.read_text()
