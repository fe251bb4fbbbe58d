"""Sampling from a frozen (merged) model: batched over num_samples with one KV cache.

The prompt is prefilled once and its cache repeated per sample; finished samples leave the
batch so long tails cost only what they use. Logprobs are the model's own (temperature 1),
which is what importance sampling needs and what the trainer recomputes.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from dataclasses import dataclass

import numpy as np
import torch
from tinker import types
from transformers import PreTrainedModel, PreTrainedTokenizerBase


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

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        eos_token_ids: list[int],
        max_positions: int,
        path: str | None = None,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.eos_token_ids = eos_token_ids
        self.max_positions = max_positions
        self.path = path  # the adapter folder it was built from; None for the base model
        self.device = next(model.parameters()).device
        self._lock = threading.Lock()  # one generation at a time: the cores are the limit anyway

    async def sample_async(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> types.SampleResponse:
        return await asyncio.to_thread(self.sample, prompt, num_samples, sampling_params)

    async def compute_logprobs_async(self, prompt: types.ModelInput) -> list[float | None]:
        return await asyncio.to_thread(self.compute_logprobs, prompt)

    def compute_logprobs(self, prompt: types.ModelInput) -> list[float | None]:
        ids = prompt.to_ints()
        if len(ids) < 2:
            return [None] * len(ids)
        with self._lock, torch.inference_mode():
            x = torch.tensor([ids], device=self.device)
            logits = self.model(input_ids=x[:, :-1]).logits[0].float()
            lp = -torch.nn.functional.cross_entropy(logits, x[0, 1:], reduction="none")
        return [None, *lp.tolist()]

    def sample(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> types.SampleResponse:
        ids = prompt.to_ints()
        if not ids:
            raise ValueError("cannot sample from an empty prompt")
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        room = self.max_positions - len(ids)
        if room <= 0:
            raise ValueError(f"prompt of {len(ids)} tokens fills the context ({self.max_positions})")
        wanted = sampling_params.max_tokens
        max_tokens = room if wanted is None else max(0, min(wanted, room))
        stop = StopRule.from_params(sampling_params.stop, self.eos_token_ids)
        with self._lock, torch.inference_mode():
            tokens, logprobs, lengths, stopped = self._generate(ids, num_samples, max_tokens, sampling_params, stop)
        sequences = [
            types.SampledSequence(
                stop_reason="stop" if stopped[i] else "length",
                sequence_id=uuid.uuid4().hex,
                tokens_np=tokens[i, : lengths[i]].astype(np.int32),
                logprobs_np=logprobs[i, : lengths[i]].astype(np.float32),
            )
            for i in range(num_samples)
        ]
        return types.SampleResponse(sequences=sequences)

    def _generate(
        self,
        ids: list[int],
        n: int,
        max_tokens: int,
        params: types.SamplingParams,
        stop: StopRule,
    ) -> tuple[np.ndarray, np.ndarray, list[int], list[bool]]:
        gen = torch.Generator(device=self.device)
        if params.seed is None:
            gen.seed()
        else:
            gen.manual_seed(int(params.seed))
        stop_ids = torch.tensor(sorted(stop.token_ids), dtype=torch.long, device=self.device)
        greedy = params.temperature <= 0

        out = self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=True, logits_to_keep=1)
        cache = out.past_key_values
        cache.batch_repeat_interleave(n)
        logits = out.logits[:, -1, :].float().expand(n, -1)

        tokens = torch.zeros(n, max_tokens, dtype=torch.long)
        logprobs = torch.zeros(n, max_tokens, dtype=torch.float32)
        lengths = [max_tokens] * n
        stopped = [False] * n
        active = torch.arange(n)  # rows of the batch -> sample index
        for t in range(max_tokens):
            logp = logits.log_softmax(-1)
            if greedy:
                nxt = logits.argmax(-1)
            else:
                probs = _filter_logits(logits, params).softmax(-1)
                nxt = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            lp = logp.gather(-1, nxt[:, None]).squeeze(-1)
            tokens[active, t] = nxt.cpu()
            logprobs[active, t] = lp.cpu()
            done = torch.isin(nxt, stop_ids).cpu() if len(stop_ids) else torch.zeros(len(active), dtype=torch.bool)
            if stop.strings:
                done |= self._string_stops(tokens, active, t, stop.strings)
            if done.any():
                for row in done.nonzero().flatten().tolist():
                    i = int(active[row])
                    lengths[i], stopped[i] = t + 1, True
                keep = (~done).nonzero().flatten()
                if len(keep) == 0:
                    break
                active, nxt = active[keep], nxt[keep.to(self.device)]
                cache.batch_select_indices(keep.to(self.device))
            if t + 1 == max_tokens:
                break
            out = self.model(input_ids=nxt[:, None], past_key_values=cache, use_cache=True)
            logits = out.logits[:, -1, :].float()
        return tokens.numpy(), logprobs.numpy(), lengths, stopped

    def _string_stops(
        self, tokens: torch.Tensor, active: torch.Tensor, t: int, strings: tuple[str, ...]
    ) -> torch.Tensor:
        """Whether each active row's text now contains a stop string (checked on a short tail)."""
        window = max(len(s) for s in strings) + 4
        tails = tokens[active, max(0, t + 1 - window) : t + 1].tolist()
        texts = self.tokenizer.batch_decode(tails)
        return torch.tensor([any(s in text for s in strings) for text in texts], dtype=torch.bool)
