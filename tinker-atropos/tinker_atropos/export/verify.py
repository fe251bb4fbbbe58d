"""An export is checked before it is reported done: loaded back from disk, its greedy replies to a
few of the environment's own prompts are compared with the trained policy's, as the inference
server samples it (`create_sampler`, temperature 0)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tinker import types

from tinker_atropos.run_files import atomic_write_text

MAX_NEW_TOKENS = 24


@dataclass
class Verification:
    prompts: int
    matches: int
    required: int  # how many must match for the export to count as done
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.matches >= self.required


def policy_replies(sampler: Any, prompts: list[list[int]]) -> list[list[int]]:
    """The trained policy's greedy replies, through the sampler the inference server serves."""
    params = types.SamplingParams(max_tokens=MAX_NEW_TOKENS, temperature=0.0)
    out = []
    for prompt in prompts:
        response = sampler.sample(types.ModelInput.from_ints(prompt), 1, params)
        out.append([int(t) for t in response.sequences[0].tokens])
    return out


def cached_replies(cache: Path | None, key: list[Any], compute: Callable[[], list[list[int]]]) -> list[list[int]]:
    """The policy's greedy replies from `cache` when an export of the same checkpoint, prompts and
    base already took them (exporting a run in three formats samples it once), else computed and kept."""
    if cache is None:
        return compute()
    path = cache / (hashlib.sha256(json.dumps(key).encode()).hexdigest()[:32] + ".json")
    try:
        return [[int(t) for t in reply] for reply in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        pass
    replies = compute()
    cache.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(replies))
    return replies


@torch.no_grad()
def model_replies(model: Any, prompts: list[list[int]], eos_ids: list[int]) -> list[list[int]]:
    """Greedy replies of a loaded transformers model, cut where the sampler stops (an eos id)."""
    out = []
    for prompt in prompts:
        ids = torch.tensor([prompt])
        gen = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=MAX_NEW_TOKENS,
            do_sample=False,
            eos_token_id=eos_ids,
        )
        out.append([int(t) for t in gen[0, len(prompt) :]])
    return out


def compare(expected: list[list[int]], got: list[list[int]], required: int, decode: Any) -> Verification:
    """Replies equal up to the shorter one's end of sequence (the sampler drops a final eos)."""
    result = Verification(len(expected), 0, required)
    for i, (want, have) in enumerate(zip(expected, got)):
        n = min(len(want), len(have))
        if want[:n] == have[:n] and abs(len(want) - len(have)) <= 1:
            result.matches += 1
        else:
            result.mismatches.append({"prompt": i, "policy": decode(want), "export": decode(have)})
    return result
