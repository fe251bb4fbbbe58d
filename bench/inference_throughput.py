"""The local inference server under concurrent load: today's serial server (one request at a
time, its n samples batched) against the continuously batched one, side by side in one run, with
a plain `model.generate` on a padded batch as the reference.

SmolLM2-135M-Instruct, realistic chat prompts, 64 new tokens, over HTTP (/v1/chat/completions)
at 1, 4, 16 and 64 concurrent requests: tokens per second and p50/p95 latency. Then a held-out
evaluation's shape (64 arithmetic items, 16 and then 64 at a time as the local profiles send
them, greedy) on both servers, and how many
greedy replies the two servers give alike on a fixed prompt set. Last, the sampler in float32
against `local_compute: bfloat16` on an agent-shaped batch, one thread as in a trainer's process.
With `--vllm`, instead: the engine (float32 and mixed bfloat16) against vLLM's server (the vllm
runtime, `make vllm`), each behind the product's inference server as a run samples, side by side.

    .venv/bin/python bench/inference_throughput.py [--levels 1 4 16 64] [--tokens 64] [--vllm]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import torch
from tinker import types

from tinker_atropos.backends.local import LocalSampler, LocalTrainingClient, create_sampler, load_base_model
from tinker_atropos.environments.arithmetic_data import question, split
from tinker_atropos.inference_server import SamplerHolder, build_app, serve_in_thread
from tinker_atropos.models.paths import model_dir
from tinker_atropos.venvs import runtime_python
from tinker_atropos.vllm_server.process import VllmProcess, VllmSpec
from tinker_atropos.vllm_server.run import free_port
from tinker_atropos.vllm_server.sampler import VllmClient, VllmSampler

MODEL = "smollm2-135m"
EVAL_WORKERS = 64  # the local profiles' max_eval_workers: a whole held-out set in flight at once
TOPICS = [
    "Explain in two sentences why the sky is blue.",
    "Write a haiku about autumn leaves.",
    "What is 47 + 38? Answer with the number.",
    "Give three tips for learning a new language.",
    "Summarise the plot of Romeo and Juliet in one paragraph.",
    "Which is larger, 0.7 or 0.65? Explain briefly.",
    "List the planets of the solar system in order.",
    "Translate 'good morning, how are you?' into French.",
]


def pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


async def load(url: str, messages: list[list[dict[str, str]]], tokens: int, temperature: float) -> dict[str, Any]:
    """All `messages` at once; completion tokens per second and latencies."""
    async with httpx.AsyncClient(base_url=url, timeout=1800) as http:

        async def one(chat: list[dict[str, str]]) -> tuple[float, int, str]:
            started = time.perf_counter()
            resp = await http.post(
                "/v1/chat/completions",
                json={"model": MODEL, "messages": chat, "max_tokens": tokens, "temperature": temperature},
            )
            resp.raise_for_status()
            body = resp.json()
            return (
                time.perf_counter() - started,
                body["usage"]["completion_tokens"],
                body["choices"][0]["message"]["content"],
            )

        started = time.perf_counter()
        done = await asyncio.gather(*(one(m) for m in messages))
        wall = time.perf_counter() - started
    latencies = [d[0] for d in done]
    return {
        "tok_s": sum(d[1] for d in done) / wall,
        "p50": pct(latencies, 50),
        "p95": pct(latencies, 95),
        "wall": wall,
        "replies": [d[2] for d in done],
    }


async def bounded(url: str, chats: list[list[dict[str, str]]], tokens: int, limit: int) -> float:
    """An evaluation's shape: every item, `limit` at a time, greedy; the wall time."""
    gate = asyncio.Semaphore(limit)

    async def one(chat: list[dict[str, str]]) -> dict[str, Any]:
        async with gate:
            return await load(url, [chat], tokens, 0.0)

    started = time.perf_counter()
    await asyncio.gather(*(one(c) for c in chats))
    return time.perf_counter() - started


def generate_reference(base: Any, chats: list[list[dict[str, str]]], tokens: int) -> float:
    """`model.generate` on one left-padded batch: tokens per second."""
    tok = base.tokenizer
    tok.padding_side = "left"
    texts = [tok.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats]
    batch = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    started = time.perf_counter()
    with torch.inference_mode():
        out = base.model.generate(**batch, max_new_tokens=tokens, do_sample=True, pad_token_id=tok.pad_token_id)
    new = out[:, batch["input_ids"].shape[1] :]
    produced = int((new != tok.pad_token_id).sum())
    return produced / (time.perf_counter() - started)


def precision(base: Any, tokens: int) -> None:
    """4 long prompts (a system prompt of tool schemas, as an agent's) x 7 samples decoded at once,
    float32 against mixed bfloat16: tokens per second, and each sampled token's logprob against the
    trainer's for the same sequence in the same precision (what an importance ratio compares)."""
    tools = " ".join(f"tool_{i}(x: int) -> int returns x times {i}." for i in range(25))
    prompts = [
        base.tokenizer.apply_chat_template(
            [{"role": "system", "content": f"You can call tools: {tools}"}, {"role": "user", "content": t}],
            add_generation_prompt=True,
            tokenize=False,
        )
        for t in TOPICS[:4]
    ]
    ids = [base.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    params = types.SamplingParams(max_tokens=tokens, temperature=1.0, stop=[])
    threads = torch.get_num_threads()
    for compute in ("float32", "bfloat16"):
        sampler = create_sampler(base, None, compute)
        sampler.batcher.prefix_cache = None
        torch.set_num_threads(1)
        started = time.perf_counter()
        futures = [sampler.batcher.submit(sampler._request(types.ModelInput.from_ints(p), 7, params)) for p in ids]
        results = [f.result() for f in futures]
        wall = time.perf_counter() - started
        torch.set_num_threads(threads)
        sampler.batcher.close()
        produced = sum(len(r.tokens) for rs in results for r in rs)
        data, sampled = [], []
        for prompt, rs in zip(ids, results):
            for r in rs:
                seq = prompt + [int(t) for t in r.tokens]
                n = len(seq) - 1
                inputs = {
                    "target_tokens": torch.tensor(seq[1:]),
                    "logprobs": torch.zeros(n),
                    "advantages": torch.ones(n),
                }
                data.append(types.Datum(model_input=types.ModelInput.from_ints(seq[:-1]), loss_fn_inputs=inputs))
                sampled.append(torch.from_numpy(r.logprobs))
        with tempfile.TemporaryDirectory() as run_dir:
            trainer = LocalTrainingClient(base, 16, Path(run_dir), "bench", compute=compute)
            out = trainer.forward_backward(data, "importance_sampling")
        gaps = torch.cat(
            [(got - o["logprobs"].to_torch()[-len(got) :]).abs() for got, o in zip(sampled, out.loss_fn_outputs)]
        )
        print(
            f"sampler {compute:>8}: {produced / wall:6.1f} tok/s on 1 thread ({len(ids[0])}-token prompts x 7); "
            f"|sampled - trainer| logprob mean {gaps.mean():.4f}, p95 {gaps.quantile(0.95):.4f}, max {gaps.max():.4f}"
        )


def start_vllm(folder: Path) -> tuple[VllmProcess, VllmSampler]:
    """vLLM's server on SmolLM2 (bfloat16, LoRA enabled as a run has it) and a sampler of its base model."""
    spec = VllmSpec(runtime_python("vllm", os.environ), str(model_dir(MODEL)), MODEL, free_port("127.0.0.1"),
                    lora_rank=16, max_loras=3, max_model_len=4096)  # fmt: skip
    started = time.perf_counter()
    process = VllmProcess(spec, folder / "vllm.log")
    process.wait_ready()
    print(f"vLLM's server answered /health after {time.perf_counter() - started:.0f} s")
    return process, VllmSampler(VllmClient(process.url), MODEL, spec.max_model_len)


async def against_vllm(levels: list[int], tokens: int) -> None:
    """The engine (float32 and mixed bfloat16) and vLLM, each behind the product's inference server, as a
    run samples: chat completions at each level in flight, then a held-out evaluation's shape."""
    base = load_base_model(MODEL, "cpu")
    with tempfile.TemporaryDirectory() as scratch:
        process, vllm = start_vllm(Path(scratch))
        samplers = {
            "engine fp32": create_sampler(base),
            "engine bf16": create_sampler(base, None, "bfloat16"),
            "vllm": vllm,
        }
        servers = {
            n: serve_in_thread(build_app(SamplerHolder(s), MODEL, base.tokenizer), "127.0.0.1", 0)
            for n, s in samplers.items()
        }
        try:
            print(
                f"{'in flight':>9} "
                + " ".join(f"{n:>12}" for n in servers)
                + "   vllm / best engine (completion tok/s)"
            )
            for level in levels:
                chats = [[{"role": "user", "content": TOPICS[i % len(TOPICS)]}] for i in range(level)]
                rates = {n: (await load(h.url, chats, tokens, 1.0))["tok_s"] for n, h in servers.items()}
                best = max(rates["engine fp32"], rates["engine bf16"])
                print(
                    f"{level:>9} " + " ".join(f"{r:>12.1f}" for r in rates.values()) + f"   x{rates['vllm'] / best:.2f}"
                )
            _, heldout = split(level=1, eval_size=64, eval_seed=1234, num_train=0, seed=0)
            chats = [[{"role": "user", "content": question(text)}] for text, _ in heldout]
            walls = {n: await bounded(h.url, chats, 16, EVAL_WORKERS) for n, h in servers.items()}
            print(
                "held-out eval shape, 64 items at once (greedy): "
                + ", ".join(f"{n} {w:.1f} s" for n, w in walls.items())
            )
        finally:
            for h in servers.values():
                h.stop()
            process.stop()


async def main(levels: list[int], tokens: int) -> None:
    base = load_base_model(MODEL, "cpu")
    serial = LocalSampler(base.copy_model(), base.tokenizer, base.eos_token_ids, base.max_positions)
    serial.batcher.max_requests = 1  # today's server: one request at a time, every prompt prefilled whole
    serial.batcher.prefix_cache = None
    batched = create_sampler(base)
    servers = {
        name: serve_in_thread(build_app(SamplerHolder(s), MODEL, base.tokenizer), "127.0.0.1", 0)
        for name, s in (("serial", serial), ("batched", batched))
    }
    try:
        print(f"{'concurrent':>10} {'server':>9} {'tok/s':>8} {'p50 s':>7} {'p95 s':>7}   batched/serial tok/s")
        for level in levels:
            chats = [[{"role": "user", "content": TOPICS[i % len(TOPICS)]}] for i in range(level)]
            rows = {name: await load(h.url, chats, tokens, 1.0) for name, h in servers.items()}
            ref = generate_reference(base, chats, tokens)
            for name, r in rows.items():
                print(f"{level:>10} {name:>9} {r['tok_s']:>8.1f} {r['p50']:>7.2f} {r['p95']:>7.2f}")
            print(
                f"{level:>10} {'generate':>9} {ref:>8.1f}        (padded batch, reference)   "
                f"x{rows['batched']['tok_s'] / rows['serial']['tok_s']:.2f}"
            )
        _, heldout = split(level=1, eval_size=64, eval_seed=1234, num_train=0, seed=0)
        chats = [[{"role": "user", "content": question(text)}] for text, _ in heldout]
        for workers in (16, EVAL_WORKERS):
            walls = {name: await bounded(h.url, chats, 16, workers) for name, h in servers.items()}
            print(
                f"held-out eval shape, 64 items {workers} at a time (greedy): serial {walls['serial']:.1f} s, "
                f"batched {walls['batched']:.1f} s, x{walls['serial'] / walls['batched']:.2f}"
            )
        fixed = [[{"role": "user", "content": t}] for t in TOPICS * 4]
        greedy = {name: (await load(h.url, fixed, 32, 0.0))["replies"] for name, h in servers.items()}
        same = sum(a == b for a, b in zip(greedy["serial"], greedy["batched"]))
        print(f"greedy replies equal on both servers: {same}/{len(fixed)} ({100 * same / len(fixed):.0f}%)")
    finally:
        for h in servers.values():
            h.stop()
    precision(base, tokens)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--precision-only", action="store_true", help="only the float32/bfloat16 sampler section")
    parser.add_argument(
        "--vllm", action="store_true", help="the engine against vLLM's server instead (the vllm runtime: `make vllm`)"
    )
    args = parser.parse_args()
    if args.precision_only:
        precision(load_base_model(MODEL, "cpu"), args.tokens)
    else:
        asyncio.run(against_vllm(args.levels, args.tokens) if args.vllm else main(args.levels, args.tokens))
