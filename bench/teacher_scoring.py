"""A teacher on the local engine scoring one step's replies: one forward per reply against the engine's
scoring of many at once (a group's prompt run once, its replies in one pass on its keys and values).

SmolLM2-135M-Instruct, a step of arithmetic's shape by default: 32 groups of 8 replies, 60-token prompts,
16-token replies (random token ids: the cost does not depend on which). Both ways alternate, --rounds
times each, in one process; the logprobs of the two ways are checked to agree.

    .venv/bin/python bench/teacher_scoring.py [--groups 32] [--group-size 8] [--prompt 60] [--reply 16] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import numpy as np
from tinker import types

from tinker_atropos.backends.local import create_sampler, load_base_model


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--groups", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=60)
    ap.add_argument("--reply", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--compute", default="float32", help="local_compute: float32 (the smollm2 profile's), bfloat16 or auto"
    )
    a = ap.parse_args()
    sampler = create_sampler(load_base_model(a.model, "cpu"), compute=a.compute)
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(a.groups):
        prompt = rng.integers(100, 20000, size=a.prompt).tolist()
        rows += [prompt + rng.integers(100, 20000, size=a.reply).tolist() for _ in range(a.group_size)]
    inputs = [types.ModelInput.from_ints(r) for r in rows]
    starts = [a.prompt] * len(rows)
    seconds: dict[str, list[float]] = {"a forward per reply": [], "many at once": []}
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        alone = await asyncio.gather(
            *(sampler.compute_logprobs_async(p, from_position=s) for p, s in zip(inputs, starts))
        )
        seconds["a forward per reply"].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        many = await sampler.compute_logprobs_many_async(inputs, starts)
        seconds["many at once"].append(time.perf_counter() - t0)
    gap = max(abs(x - y) for one, all_ in zip(alone, many) for x, y in zip(one[a.prompt :], all_[a.prompt :]))
    per, together = (statistics.median(v) for v in seconds.values())
    shape = f"{len(rows)} replies ({a.groups} groups x {a.group_size}), prompt {a.prompt} + reply {a.reply} tokens"
    print(f"{shape}, {a.model}, {a.compute}")
    for name, values in seconds.items():
        print(f"  {name:20s} median {statistics.median(values):6.2f} s  ({', '.join(f'{v:.2f}' for v in values)})")
    print(f"  ratio {per / together:.1f}x; largest logprob difference {gap:.2e}")


if __name__ == "__main__":
    asyncio.run(main())
