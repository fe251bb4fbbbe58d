"""The local sampler's continuous batching, on a real model: concurrent requests share the batch
(and join it mid-flight), each sampled token's logprob is the model's own, per-request settings
hold, a cancelled request leaves the batch, a bad one is refused alone, and a weight swap never
reaches a sequence in flight; the HTTP server answers concurrent chat completions batched."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import time

import httpx
import pytest
import torch
from numerics import logprob_tol, rounded_weights_rel
from tinker import types

from tinker_atropos.backends.local import LocalSampler, create_sampler, load_base_model

pytestmark = [pytest.mark.anyio, pytest.mark.kernels]
BF16_UNIT = 2.0**-8  # bfloat16's unit roundoff: 8 significant bits


def lp_tolerance(base, positions: int) -> float:
    """float32 attention over padded, batched or cached rows vs one row alone: numerics.logprob_tol
    at the size of a uniform logprob over the vocabulary (the random model's), plus one."""
    return logprob_tol(base.model.config, positions, math.log(base.model.config.vocab_size) + 1.0)


def bf16_tolerances(base, tokens: list[int]) -> tuple[float, float]:
    """(mean, max) of |sampled - recomputed| logprobs when both sides compute in bfloat16: each of
    the 4 matmuls a layer on the path rounds its inputs to 8 bits (about BF16_UNIT relative each,
    independent), scaled by the logits' size (the log-softmax moves with them); the mean uses the
    rounding's standard deviation (u / sqrt 3) where the max uses numerics.LAMBDA."""
    with torch.no_grad():
        logits = float(base.model(input_ids=torch.tensor([tokens])).logits.abs().max())
    matmuls = 4 * base.model.config.num_hidden_layers
    mean = 2 * BF16_UNIT / math.sqrt(3) * math.sqrt(matmuls) * logits
    return mean, 2 * rounded_weights_rel(matmuls, BF16_UNIT) * logits


@pytest.fixture(scope="module")
def base():
    return load_base_model("tiny-chat", "cpu")


def _prompt(base, text: str) -> list[int]:
    chat = [{"role": "user", "content": text}]
    return base.tokenizer.encode(
        base.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False), add_special_tokens=False
    )


def _params(**kw) -> types.SamplingParams:
    return types.SamplingParams(**{"max_tokens": 24, "temperature": 1.0, "stop": [], **kw})


async def _sample(sampler: LocalSampler, prompt: list[int], n: int = 1, **kw) -> types.SampleResponse:
    return await sampler.sample_async(types.ModelInput.from_ints(prompt), n, _params(**kw))


async def test_concurrent_requests_share_the_batch_with_exact_logprobs(base) -> None:
    sampler = create_sampler(base)
    prompts = [_prompt(base, f"Say something about the number {i}" + "!" * i) for i in range(6)]
    first = asyncio.create_task(_sample(sampler, prompts[0], n=2, max_tokens=40))
    await asyncio.sleep(0.2)  # the others arrive while the first decodes: they join its batch
    rest = [
        _sample(sampler, p, n=1 + i % 2, temperature=[1.0, 0.7, 0.0][i % 3], seed=i)
        for i, p in enumerate(prompts[1:], 1)
    ]
    responses = [await first, *await asyncio.gather(*rest)]
    assert sampler.batcher.peak_rows > 2, "the requests never decoded together"
    worst, longest = 0.0, 0
    for prompt, response in zip(prompts, responses):
        for seq in response.sequences:
            tokens = [int(t) for t in seq.tokens]
            fresh = sampler.compute_logprobs(types.ModelInput.from_ints(prompt + tokens))[len(prompt) :]
            worst = max(worst, max(abs(a - b) for a, b in zip(seq.logprobs, fresh)))
            longest = max(longest, len(prompt) + len(tokens))
    print(f"largest |batched - fresh forward| logprob difference: {worst:.2e}")
    assert worst <= lp_tolerance(base, longest)


async def test_bfloat16_sampler_logprobs_match_the_bfloat16_trainer_within_its_precision(base, tmp_path) -> None:
    """`local_compute: bfloat16` samples in mixed precision too (linear weights cast once, the head
    in float32): each sampled token's logprob is within bfloat16's precision of a fresh pass of the
    same weights and of the trainer's own, which the importance ratios compare with it."""
    from tinker_atropos.backends.local import LocalTrainingClient

    sampler = create_sampler(base, None, "bfloat16")
    head = sampler.model.get_output_embeddings()
    linear = [m for m in sampler.model.modules() if isinstance(m, torch.nn.Linear) and m is not head]
    assert linear and all(m.weight.dtype is torch.bfloat16 for m in linear) and head.weight.dtype is torch.float32
    prompts = [_prompt(base, f"Tell me about the number {i}" + "?" * i) for i in range(4)]
    responses = await asyncio.gather(*(_sample(sampler, p, n=2, max_tokens=32, seed=i) for i, p in enumerate(prompts)))
    trainer = LocalTrainingClient(base, rank=4, run_dir=tmp_path, run_name="t", seed=0, compute="bfloat16")
    data, sampled = [], []
    for prompt, response in zip(prompts, responses):
        for seq in response.sequences:
            tokens = prompt + [int(t) for t in seq.tokens]
            n = len(tokens) - 1
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(tokens[:-1]),
                    loss_fn_inputs={
                        "target_tokens": torch.tensor(tokens[1:]),
                        "logprobs": torch.zeros(n),
                        "advantages": torch.cat([torch.zeros(len(prompt) - 1), torch.ones(n - len(prompt) + 1)]),
                    },
                )
            )
            fresh = sampler.compute_logprobs(types.ModelInput.from_ints(tokens))[len(prompt) :]
            sampled.append((torch.tensor(seq.logprobs), torch.tensor(fresh)))
    out = trainer.forward_backward(data, "importance_sampling")  # a fresh LoRA adds nothing yet
    gaps_fresh, gaps_trainer = [], []
    for (got, fresh), answer in zip(sampled, out.loss_fn_outputs):
        reply = len(got)
        gaps_fresh.append((got - fresh).abs())
        gaps_trainer.append((got - answer["logprobs"].to_torch()[-reply:]).abs())
    fresh_gap, trainer_gap = torch.cat(gaps_fresh), torch.cat(gaps_trainer)
    print(
        f"bfloat16 sampler: |sampled - fresh| mean {fresh_gap.mean():.4f} max {fresh_gap.max():.4f}; "
        f"|sampled - trainer| mean {trainer_gap.mean():.4f} max {trainer_gap.max():.4f}"
    )
    mean_tol, max_tol = bf16_tolerances(base, data[0].model_input.to_ints())
    print(f"bfloat16 tolerances: mean {mean_tol:.4f} max {max_tol:.4f}")
    assert fresh_gap.mean() <= mean_tol and trainer_gap.mean() <= mean_tol
    assert fresh_gap.max() <= max_tol and trainer_gap.max() <= max_tol
    assert trainer_gap.max() > 0  # it really sampled in bfloat16


async def test_greedy_replies_batched_equal_one_request_at_a_time(base) -> None:
    prompts = [_prompt(base, f"Count to {i} and stop") for i in range(10)]
    serial = LocalSampler(base.copy_model(), base.tokenizer, base.eos_token_ids, base.max_positions)
    serial.batcher.max_requests = 1
    alone = [await _sample(serial, p, temperature=0.0) for p in prompts]
    batched_sampler = create_sampler(base)
    together = await asyncio.gather(*(_sample(batched_sampler, p, temperature=0.0) for p in prompts))
    assert batched_sampler.batcher.peak_rows >= 5
    same = sum(list(a.sequences[0].tokens) == list(b.sequences[0].tokens) for a, b in zip(alone, together))
    print(f"greedy replies equal batched and alone: {same}/{len(prompts)}")
    assert same >= 0.95 * len(prompts)


async def test_prompts_that_start_alike_reuse_the_cache_with_exact_logprobs(base) -> None:
    """A shared system prompt is prefilled once for requests arriving together, a later prompt
    and a conversation's next turn start from the cache, and every logprob is still the model's."""
    system = "You are a careful assistant. Answer in one short sentence and never use lists. " * 2
    chats = [
        [{"role": "system", "content": system}, {"role": "user", "content": f"Tell me about {w}"}] for w in "abcdef"
    ]
    prompts = [
        base.tokenizer.encode(
            base.tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False), add_special_tokens=False
        )
        for c in chats
    ]
    sampler = create_sampler(base)
    cold = create_sampler(base)
    cold.batcher.prefix_cache = None  # every prompt prefilled whole: the reference
    together = await asyncio.gather(*(_sample(sampler, p, temperature=0.0) for p in prompts[:5]))
    reply = [int(t) for t in together[0].sequences[0].tokens]
    next_turn = prompts[0] + reply + _prompt(base, "And why?")  # the conversation goes on
    later = [await _sample(sampler, p, temperature=0.0) for p in (prompts[5], next_turn)]
    sent = sum(map(len, prompts)) + len(next_turn)
    print(f"prompt tokens sent {sent}, prefilled {sampler.batcher.prefilled_tokens}")
    assert sampler.batcher.prefilled_tokens < 0.6 * sent, "the shared starts were prefilled again"
    assert sampler.batcher.cached_tokens >= len(prompts[0]) + len(reply), "the next turn did not start from the cache"
    worst, same = 0.0, 0
    for prompt, response in zip([*prompts, next_turn], [*together, *later]):
        tokens = [int(t) for t in response.sequences[0].tokens]
        fresh = sampler.compute_logprobs(types.ModelInput.from_ints(prompt + tokens))[len(prompt) :]
        worst = max(worst, max(abs(a - b) for a, b in zip(response.sequences[0].logprobs, fresh)))
        same += tokens == [int(t) for t in (await _sample(cold, prompt, temperature=0.0)).sequences[0].tokens]
    print(f"largest |cached - fresh forward| logprob difference: {worst:.2e}; greedy equal {same}/7")
    assert worst <= lp_tolerance(base, len(next_turn) + 24)
    assert same >= 6


async def test_scoring_starts_from_the_cached_prompt_and_does_not_wait_for_the_batch(base) -> None:
    """The trainer scores sequences that came without logprobs: only from where it needs them, the
    prompt's keys and values taken from the cache, on the batching thread between two decode steps
    (not queued behind a busy batch)."""
    sampler = create_sampler(base)
    prompt = _prompt(base, "Tell me a long story about " + "dragons and castles " * 6)
    reply = [int(t) for t in (await _sample(sampler, prompt, temperature=0.0)).sequences[0].tokens]
    full = types.ModelInput.from_ints(prompt + reply)
    reference = create_sampler(base)
    reference.batcher.prefix_cache = None
    whole = reference.compute_logprobs(full)
    busy = [
        sampler.batcher.submit(
            sampler._request(types.ModelInput.from_ints(_prompt(base, f"Count to {i}")), 2, _params(max_tokens=400))
        )
        for i in range(8)
    ]
    part = await sampler.compute_logprobs_async(full, from_position=len(prompt))
    assert not all(f.done() for f in busy), "scoring waited for the whole batch"
    skipped = sum(v is None for v in part)
    assert len(part) == len(whole) and 1 < skipped <= len(prompt)
    assert whole[0] is None and all(v is not None for v in whole[1:])
    worst = max(abs(a - b) for a, b in zip(part[len(prompt) :], whole[len(prompt) :]))
    assert worst <= lp_tolerance(base, len(full.to_ints()))
    for f in busy:
        f.result()


EXIT_MID_BATCH = """
import sys, time
from tinker import types
from tinker_atropos.backends.local import create_sampler, load_base_model
sampler = create_sampler(load_base_model("tiny-chat", "cpu"))
params = types.SamplingParams(max_tokens=3000, temperature=1.0, stop=[])
prompt = types.ModelInput.from_ints(list(range(1, 200)))
busy = [sampler.batcher.submit(sampler._request(prompt, 4, params)) for _ in range(8)]
time.sleep(1.0)
sys.exit(3)
"""


def test_a_process_that_exits_mid_batch_keeps_its_exit_code() -> None:
    """The batching thread is stopped before the interpreter is torn down: a daemon thread left
    inside a forward pass made the C++ runtime abort the process (134), losing a run's exit code."""
    done = subprocess.run([sys.executable, "-c", EXIT_MID_BATCH], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr[-2000:]
    assert "terminate called" not in done.stderr


async def test_each_request_keeps_its_own_limits_and_stops(base) -> None:
    sampler = create_sampler(base)
    prompt = _prompt(base, "Write a long story")
    stop_text = base.tokenizer.decode((await _sample(sampler, prompt, temperature=0.0)).sequences[0].tokens[3:5])
    short, stopped, many, empty = await asyncio.gather(
        _sample(sampler, prompt, temperature=0.0, max_tokens=5),
        _sample(sampler, prompt, temperature=0.0, stop=[stop_text]),
        _sample(sampler, prompt, n=3, max_tokens=7),
        _sample(sampler, prompt, max_tokens=0),
    )
    assert len(short.sequences[0].tokens) == 5 and short.sequences[0].stop_reason == "length"
    text = base.tokenizer.decode(stopped.sequences[0].tokens)
    assert stopped.sequences[0].stop_reason == "stop" and text.endswith(stop_text[-1]) and stop_text in text
    assert len(many.sequences) == 3 and all(len(s.tokens) == 7 for s in many.sequences)
    assert list(empty.sequences[0].tokens) == []


async def test_a_cancelled_request_leaves_the_batch_and_the_others_finish(base) -> None:
    sampler = create_sampler(base)
    long = asyncio.create_task(_sample(sampler, _prompt(base, "Go on forever"), n=4, max_tokens=2000))
    other = asyncio.create_task(_sample(sampler, _prompt(base, "Hi"), max_tokens=30))
    for _ in range(100):
        if sampler.batcher.rows >= 4:
            break
        await asyncio.sleep(0.02)
    long.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long
    assert len((await other).sequences[0].tokens) == 30
    deadline = time.monotonic() + 5
    while sampler.batcher.rows and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert sampler.batcher.rows == 0


async def test_a_bad_request_is_refused_alone(base) -> None:
    sampler = create_sampler(base)
    good = asyncio.create_task(_sample(sampler, _prompt(base, "Hello"), max_tokens=20))
    with pytest.raises(ValueError, match="empty prompt"):
        await _sample(sampler, [])
    with pytest.raises(ValueError, match="fills the context"):
        await _sample(sampler, [1] * (base.max_positions + 1))
    assert len((await good).sequences[0].tokens) == 20


async def test_a_sequence_in_flight_keeps_the_weights_it_started_with(base) -> None:
    """The trainer swaps samplers between steps: requests that started before finish on the old
    weights, every request after uses the new ones."""
    from tinker_atropos.inference_server import SamplerHolder

    old = create_sampler(base)
    changed = base.copy_model()
    with torch.no_grad():
        changed.lm_head.weight.add_(torch.randn_like(changed.lm_head.weight) * 0.5)
    new = LocalSampler(changed, base.tokenizer, base.eos_token_ids, base.max_positions)
    prompt = _prompt(base, "Tell me a tale")
    want_old = (await _sample(old, prompt, temperature=0.0, max_tokens=60)).sequences[0].tokens
    want_new = (await _sample(new, prompt, temperature=0.0, max_tokens=60)).sequences[0].tokens
    assert list(want_old) != list(want_new)

    holder = SamplerHolder(old)
    started = asyncio.create_task(_sample(holder.current()[0], prompt, temperature=0.0, max_tokens=60))
    await asyncio.sleep(0.1)
    holder.swap(new, "step-000001")
    after = await _sample(holder.current()[0], prompt, temperature=0.0, max_tokens=60)
    assert list((await started).sequences[0].tokens) == list(want_old)
    assert list(after.sequences[0].tokens) == list(want_new)


def test_the_server_batches_concurrent_chat_completions_and_errors_one_bad_request(base) -> None:
    from tinker_atropos.inference_server import SamplerHolder, build_app, serve_in_thread

    sampler = create_sampler(base)
    handle = serve_in_thread(build_app(SamplerHolder(sampler), "tiny-chat", base.tokenizer), "127.0.0.1", 0)
    try:

        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=handle.url, timeout=120) as http:
                body = {"model": "tiny-chat", "max_tokens": 16, "temperature": 1.0, "logprobs": True}
                chats = [[{"role": "user", "content": f"hi {i}"}] for i in range(8)]
                good = [http.post("/v1/chat/completions", json={**body, "messages": chat}) for chat in chats]
                bad = http.post("/v1/chat/completions", json={**body, "messages": [], "max_tokens": -3})
                return await asyncio.gather(*good, bad)

        *good, bad = asyncio.run(run())
    finally:
        handle.stop()
    assert all(r.status_code == 200 for r in good), [r.text for r in good]
    assert all(r.json()["choices"][0]["logprobs"]["content"] for r in good)
    assert bad.status_code == 400 and "error" in bad.json() and bad.json()["error"]["message"]
    assert sampler.batcher.peak_rows > 1
