"""Sampling from a frozen (merged) model, every request in flight in one batch (`batching.py`).

A request's prompt is prefilled once (less what an earlier prompt's cache already holds,
`prefix_cache.py`) and its cache repeated per sample; requests that arrive
while others decode join the batch, finished samples leave it so long tails cost only what they
use. Logprobs are the model's own (temperature 1), which is what importance sampling needs and
what the trainer recomputes.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from concurrent.futures import Future
from dataclasses import dataclass

import numpy as np
import torch
from tinker import types
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tinker_atropos.backends.local.batching import ContinuousBatcher, Request, Sampled, TokenSink
from tinker_atropos.backends.local.prefix_cache import PrefixCache


@dataclass(frozen=True)
class StopRule:
    """Token ids and strings that end a sample (the matching token is kept)."""

    token_ids: frozenset[int]
    strings: tuple[str, ...]

    @classmethod
    def from_params(cls, stop: object, eos_token_ids: list[int]) -> StopRule:
        """None -> EOS; a list replaces EOS entirely (Tinker: `[]` disables every stop)."""
        if stop is None:
            return cls(frozenset(eos_token_ids), ())
        items = [stop] if isinstance(stop, (str, int)) else list(stop)  # type: ignore[arg-type]
        return cls(
            frozenset(int(s) for s in items if not isinstance(s, str)),
            tuple(s for s in items if isinstance(s, str) and s),
        )


def _filter_logits(logits: torch.Tensor, params: types.SamplingParams) -> torch.Tensor:
    logits = logits / params.temperature
    if params.top_k is not None and 0 < params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p is not None and params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= params.top_p  # keep the smallest prefix reaching top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


class LocalSampler:
    """A SamplingBackend over one private, frozen model copy."""

    streams_tokens = True  # sample_async takes `on_token` (the inference server's streamed replies)

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        eos_token_ids: list[int],
        max_positions: int,
        path: str | None = None,
        autocast: torch.dtype | None = None,
        seed: int | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.max_positions = max_positions
        self.path = path  # the adapter folder it was built from; None for the base model
        # requests without a seed draw one from this stream: a seeded run samples the same way
        # when its requests arrive in the same order (None: fresh entropy every request)
        self._seeds = None if seed is None else random.Random(seed)
        self.device = next(model.parameters()).device
        self.batcher = ContinuousBatcher(
            model, tokenizer, _filter_logits, prefix_cache=PrefixCache(), autocast=autocast
        )

    async def sample_async(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        on_token: TokenSink | None = None,
    ) -> types.SampleResponse:
        request = self._request(prompt, num_samples, sampling_params)
        request.on_token = on_token
        if request.max_tokens == 0:
            return _response([_EMPTY] * num_samples)
        try:
            results = await asyncio.wrap_future(self.batcher.submit(request))
        except asyncio.CancelledError:
            self.batcher.cancel(request)  # the client went away: its samples leave the batch
            raise
        return _response(results)

    @property
    def decoding(self) -> dict[str, float | int | None]:
        """Rows decoding now; the mean wall time of a decode step and its mean rows (/health)."""
        clock = self.batcher.clock
        by_rows = {str(rows): s for rows, s in clock.by_rows.items()}
        return {"rows": self.batcher.rows, "step_s": clock.step_s, "mean_rows": clock.rows, "step_s_by_rows": by_rows}

    @property
    def generated_tokens(self) -> int:
        """Tokens sampled so far, counted as they are decoded (the inference server's /health)."""
        return self.batcher.generated_tokens

    async def compute_logprobs_async(self, prompt: types.ModelInput, from_position: int = 0) -> list[float | None]:
        return await asyncio.wrap_future(self._scored(prompt, from_position))

    async def compute_logprobs_many_async(
        self, prompts: list[types.ModelInput], from_positions: list[int]
    ) -> list[list[float | None]]:
        """compute_logprobs_async of many prompts at once: those that share their start (a group's prompt)
        run it once, then their rests in one padded pass (a step's replies, scored together)."""
        rows = [p.to_ints() for p in prompts]
        return await asyncio.wrap_future(self.batcher.call(lambda: self.batcher.score_rows(rows, from_positions)))

    def compute_logprobs(self, prompt: types.ModelInput, from_position: int = 0) -> list[float | None]:
        return self._scored(prompt, from_position).result()

    def _scored(self, prompt: types.ModelInput, from_position: int) -> Future[list[float | None]]:
        """Scored by the batching thread between two decode steps (a caller waiting on the model's
        lock would starve behind a busy batch), from the prefix cache where it holds the start."""
        ids = prompt.to_ints()
        return self.batcher.call(lambda: self.batcher.score(ids, from_position))

    def sample(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> types.SampleResponse:
        request = self._request(prompt, num_samples, sampling_params)
        if request.max_tokens == 0:
            return _response([_EMPTY] * num_samples)
        return _response(self.batcher.submit(request).result())

    def _request(self, prompt: types.ModelInput, num_samples: int, params: types.SamplingParams) -> Request:
        """A checked request: a bad one is refused here, before it could touch the batch."""
        ids = prompt.to_ints()
        if not ids:
            raise ValueError("cannot sample from an empty prompt")
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        room = self.max_positions - len(ids)
        if room <= 0:
            raise ValueError(f"prompt of {len(ids)} tokens fills the context ({self.max_positions})")
        wanted = params.max_tokens
        max_tokens = room if wanted is None else max(0, min(wanted, room))
        stop = StopRule.from_params(params.stop, self.eos_token_ids)
        gen = torch.Generator(device=self.device)
        if params.seed is not None:
            gen.manual_seed(int(params.seed))
        elif self._seeds is not None:
            gen.manual_seed(self._seeds.getrandbits(63))
        else:
            gen.seed()
        return Request(ids, num_samples, max_tokens, params, stop.token_ids, stop.strings, gen)


_EMPTY = Sampled(np.zeros(0, np.int32), np.zeros(0, np.float32), False)


def _response(results: list[Sampled]) -> types.SampleResponse:
    return types.SampleResponse(
        sequences=[
            types.SampledSequence(
                stop_reason="stop" if r.stopped else "length",
                sequence_id=uuid.uuid4().hex,
                tokens_np=r.tokens,
                logprobs_np=r.logprobs,
            )
            for r in results
        ]
    )
