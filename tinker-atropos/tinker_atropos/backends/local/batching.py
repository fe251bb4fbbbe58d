"""Continuous (in-flight) batching for the local sampler: every request in flight decodes in one
batch, one token per step; a request that arrives while others decode is prefilled and joins the
batch at the next step, and a finished (or cancelled) sample leaves it at once.

One thread owns the model: scoring (`score`, the trainer's logprobs for sequences that came
without them) runs on it too, between two steps. Rows (one per sample) share a KV cache,
left-padded to a common length: a row's padding is masked out and its positions count only its
own tokens, so each row computes what it would alone (up to float rounding). Logprobs are the model's own (temperature
1) from the same forward pass that produced the token. The thread exits when idle and starts
again on the next request; a sampler swapped out by the trainer finishes the rows it has and is
never given another, so no sequence ever changes weights half way.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tinker import types
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from tinker_atropos.backends.local.decode_clock import DecodeClock
from tinker_atropos.backends.local.precision import mixed
from tinker_atropos.backends.local.prefix_cache import MIN_REUSE, Hit, PrefixCache, common_prefix

logger = logging.getLogger(__name__)
IDLE_EXIT_S = 30.0  # an idle batching thread exits after this; the next request starts another
MAX_ROWS = 64  # rows decoding at once; further requests wait for room
ROOM_STEP = 256  # spare positions a cache buffer gets beyond what it holds (then it doubles)
SCORE_PASS_TOKENS = 2048  # positions a scoring pass holds (its float32 logits: 400 MB at SmolLM2's vocabulary)
EXIT_JOIN_S = 10.0  # at interpreter exit, how long a batching thread gets to finish its forward pass


# (which of the request's samples, the token, its logprob): called on the batching thread, so it must
# only hand the token over (to a queue, a loop's call_soon_threadsafe), never block
TokenSink = Callable[[int, int, float], None]


@dataclass
class Sampled:
    """One finished sample: its tokens, their logprobs, and whether a stop (not the length) ended it."""

    tokens: np.ndarray
    logprobs: np.ndarray
    stopped: bool


@dataclass
class Request:
    prompt: list[int]
    n: int
    max_tokens: int
    params: types.SamplingParams
    stop_ids: frozenset[int]
    stop_strings: tuple[str, ...]
    generator: torch.Generator
    future: Future[list[Sampled]] = field(default_factory=Future)
    results: dict[int, Sampled] = field(default_factory=dict)
    cancelled: bool = False
    on_token: TokenSink | None = None  # told of each token as it is sampled (a streamed reply)

    @property
    def greedy(self) -> bool:
        return self.params.temperature <= 0


@dataclass
class _Row:
    request: Request
    index: int  # which of the request's n samples
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class ContinuousBatcher:
    """Decodes every submitted request in one shared batch; `submit` is safe from any thread."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        filter_logits: Callable[[torch.Tensor, types.SamplingParams], torch.Tensor],
        max_requests: int | None = None,
        prefix_cache: PrefixCache | None = None,
        autocast: torch.dtype | None = None,
    ) -> None:
        """`max_requests`: requests decoding at once (None: as many as MAX_ROWS rows hold; 1 is the
        old serial server, one request at a time with its n samples batched, kept for the bench).
        `prefix_cache`: prompts' starts already run (None: every prompt is prefilled whole).
        `autocast`: the mixed precision the model runs in (`precision.py`; None: as its weights)."""
        self.model = model
        self.autocast = autocast
        self.max_requests = max_requests
        self.tokenizer = tokenizer
        self.filter_logits = filter_logits
        self.device = next(model.parameters()).device
        self._pending: list[Request] = []
        self._jobs: list[tuple[Callable[[], Any], Future[Any]]] = []  # run by the thread between steps
        self._closing = False
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._rows: list[_Row] = []
        self._cache: DynamicCache | None = None  # per layer [rows, heads, length, dim], rows left-padded
        self._mask = torch.zeros(0, 0, dtype=torch.long)  # [rows, length]: 0 on each row's left padding
        self._logits = torch.zeros(0, 0)  # [rows, vocab]: the next token's, per row
        self.prefix_cache = prefix_cache
        self.steps = 0  # decode steps run (for tests and the bench)
        self.generated_tokens = 0  # tokens sampled so far, every row's (a long reply's progress)
        self.prefilled_tokens = 0  # prompt tokens run through the model
        self.cached_tokens = 0  # prompt tokens whose keys and values came from the prefix cache
        self.peak_rows = 0
        self.clock = DecodeClock()  # the wall time a step takes, as a row lives it (/health)

    # -- the caller's side ----------------------------------------------------------------------
    def submit(self, request: Request) -> Future[list[Sampled]]:
        with self._wake:
            self._pending.append(request)
            self._start()
            self._wake.notify()
        return request.future

    def close(self) -> None:
        """Fail what is waiting or in flight and let the thread leave after its current step."""
        with self._wake:
            self._closing = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join(EXIT_JOIN_S)

    def _start(self) -> None:
        if self._closing:
            raise RuntimeError("the sampler is shutting down")
        _LIVE.add(self)
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="continuous-batcher", daemon=True)
            self._thread.start()

    def call(self, job: Callable[[], Any]) -> Future[Any]:
        """Run `job` on the batching thread, which owns the model, between two decode steps."""
        future: Future[Any] = Future()
        with self._wake:
            self._jobs.append((job, future))
            self._start()
            self._wake.notify()
        return future

    def cancel(self, request: Request) -> None:
        """The client went away: its rows leave the batch at the next step."""
        request.cancelled = True
        with self._wake:
            if request in self._pending:
                self._pending.remove(request)

    @property
    def rows(self) -> int:
        return len(self._rows)

    # -- the batching thread --------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._wake:
                if self._closing:
                    self._fail_all(RuntimeError("the sampler is shutting down"))
                    self._thread = None
                    return
                if not self._pending and not self._rows and not self._jobs:
                    self._wake.wait(IDLE_EXIT_S)
                    if not self._pending and not self._rows and not self._jobs:
                        self._thread = None
                        return
                admitted: list[Request] = []
                while self._pending and self._has_room(admitted, self._pending[0]):
                    admitted.append(self._pending.pop(0))
                jobs, self._jobs = self._jobs, []
            with torch.inference_mode(), mixed(self.device, self.autocast):
                self._run_jobs(jobs)
                try:
                    started = time.monotonic()
                    self._admit([r for r in admitted if not r.cancelled])
                    self.clock.exclude(time.monotonic() - started)  # a prefill is paid once, not a token
                    self._step()
                except Exception as exc:  # fails the requests in flight; the batcher goes on with the next
                    logger.exception("batched decode step failed")
                    for row in self._rows:
                        if not row.request.future.done():
                            row.request.future.set_exception(exc)
                    self._reset()

    @staticmethod
    def _run_jobs(jobs: list[tuple[Callable[[], Any], Future[Any]]]) -> None:
        for job, future in jobs:
            if not future.set_running_or_notify_cancel():
                continue  # its caller went away
            try:
                result = job()
            except Exception as exc:  # the job's caller gets its error; the batch goes on
                future.set_exception(exc)
            else:
                future.set_result(result)

    def _fail_all(self, exc: Exception) -> None:
        for request in [*self._pending, *(row.request for row in self._rows)]:
            if not request.future.done():
                request.future.set_exception(exc)
        for _, future in self._jobs:
            if not future.done():
                future.set_exception(exc)
        self._pending, self._jobs = [], []
        self._reset()

    def _has_room(self, admitted: list[Request], request: Request) -> bool:
        in_flight = {id(r.request) for r in self._rows} | {id(r) for r in admitted}
        if self.max_requests is not None and len(in_flight) >= self.max_requests:
            return False
        rows = len(self._rows) + sum(r.n for r in admitted)
        return rows == 0 or rows + request.n <= MAX_ROWS  # a request larger than MAX_ROWS runs alone

    def _admit(self, requests: list[Request]) -> None:
        """Prefill the new prompts in one pass, then join the batch with n rows each."""
        if not requests:
            return
        self._prefill_common_prefix([r.prompt for r in requests])
        cache, mask, logits = self._prefill([r.prompt for r in requests])
        rows = torch.tensor([i for i, r in enumerate(requests) for _ in range(r.n)], device=self.device)
        cache.batch_select_indices(rows)  # each prompt's cache once per sample
        self._merge(cache, mask.index_select(0, rows), logits.index_select(0, rows))
        self._rows += [_Row(r, k) for r in requests for k in range(r.n)]
        self.peak_rows = max(self.peak_rows, len(self._rows))

    def _prefill_common_prefix(self, prompts: list[list[int]]) -> None:
        """Prompts arriving together that start alike (a chat template, a system prompt, tool
        schemas) have that start run once, so the prefill below finds it in the prefix cache."""
        if self.prefix_cache is None or len(prompts) < 2:
            return
        first = np.asarray(prompts[0])
        shared = min(min(common_prefix(first, np.asarray(p)) for p in prompts[1:]), min(map(len, prompts)) - 1)
        hit = self.prefix_cache.lookup(prompts[0][: shared + 1])
        if shared - (hit.length if hit else 0) >= MIN_REUSE:
            self._prefill([prompts[0][:shared]])

    def _prefill(self, prompts: list[list[int]]) -> tuple[DynamicCache, torch.Tensor, torch.Tensor]:
        """One forward pass over the prompts' uncached tokens: each row is [its cached prefix,
        right-aligned in the prefix columns][its other tokens, right-aligned], padding masked out.
        Returns the cache, the mask [rows, length] and each row's next-token logits."""
        hits = [self.prefix_cache.lookup(p) if self.prefix_cache is not None else None for p in prompts]
        cached = [h.length if h else 0 for h in hits]
        front, width = max(cached), max(len(p) - c for p, c in zip(prompts, cached))
        ids = torch.zeros(len(prompts), width, dtype=torch.long, device=self.device)
        mask = torch.zeros(len(prompts), front + width, dtype=torch.long, device=self.device)
        for i, (p, c) in enumerate(zip(prompts, cached)):
            ids[i, width - (len(p) - c) :] = torch.tensor(p[c:])
            mask[i, front - c : front] = 1
            mask[i, front + width - (len(p) - c) :] = 1
        positions = ((mask.cumsum(-1) - 1).clamp(min=0))[:, front:]
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            cache=_prefix_kv(hits, front) if front else None,
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out.cache
        if self.prefix_cache is not None:
            for i, p in enumerate(prompts):
                self._keep(p, cache, i, mask[i])
        self.prefilled_tokens += int(mask[:, front:].sum())
        self.cached_tokens += sum(cached)
        return cache, mask, out.logits[:, -1, :].float()

    def _keep(self, tokens: list[int], cache: DynamicCache, row: int, mask: torch.Tensor) -> None:
        """Store one row's cache (its real columns, copied out of the batch) under `tokens`."""
        assert self.prefix_cache is not None
        columns = mask.nonzero().squeeze(-1)
        if len(columns) != len(tokens):
            return
        keys = [layer.keys[row].index_select(1, columns) for layer in cache.layers]
        values = [layer.values[row].index_select(1, columns) for layer in cache.layers]
        self.prefix_cache.add(tokens, keys, values)

    def score(self, ids: list[int], start: int = 0) -> list[float | None]:
        """Each token's logprob given the ones before it (None for the first, and for positions
        before `start` whose keys and values came from the prefix cache). Batching thread only."""
        if len(ids) < 2:
            return [None] * len(ids)
        hit = self.prefix_cache.lookup(ids[:start]) if self.prefix_cache is not None and start > 1 else None
        cached = hit.length if hit else 0
        x = torch.tensor([ids[cached:-1]], device=self.device)
        positions = torch.arange(cached, len(ids) - 1, device=self.device)[None]
        past = _prefix_kv([hit], cached) if hit else None
        logits = self.model(input_ids=x, position_ids=positions, cache=past, use_cache=past is not None).logits[0]
        targets = torch.tensor(ids[cached + 1 :], device=self.device)
        lp = -torch.nn.functional.cross_entropy(logits.float(), targets, reduction="none")
        return [None] * (cached + 1) + lp.tolist()

    def score_rows(self, rows: list[list[int]], starts: list[int]) -> list[list[float | None]]:
        """`score` of many sequences (a teacher or the base model scoring a step's replies). Those that share
        their first `starts[i]` tokens (a group's prompt) take one pass over it, then one padded pass for
        their rests on its keys and values: a group's prompt is run once, not once a reply. Positions
        before a row's start come back None. Batching thread only."""
        out: list[list[float | None]] = [[None] * len(r) for r in rows]
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (row, start) in enumerate(zip(rows, starts, strict=True)):
            if len(row) >= 2:
                groups.setdefault(tuple(row[: min(max(start, 1), len(row) - 1)]), []).append(i)
        for prompt, members in groups.items():
            head = self.model(input_ids=torch.tensor([prompt], device=self.device), use_cache=True)
            first = head.logits[0, -1].float().log_softmax(-1)
            for i in members:
                out[i][len(prompt)] = float(first[rows[i][len(prompt)]])
            longest = max(len(rows[i]) for i in members) - len(prompt) - 1
            per_pass = max(1, SCORE_PASS_TOKENS // max(longest, 1))
            for at in range(0, len(members) if longest > 0 else 0, per_pass):
                self._score_rests(
                    [rows[i] for i in members[at : at + per_pass]], len(prompt), head.cache, out, members[at:]
                )
        return out

    def _score_rests(
        self,
        rows: list[list[int]],
        front: int,
        prompt_cache: DynamicCache,
        out: list[list[float | None]],
        where: list[int],
    ) -> None:
        """Each row's tokens after its first `front + 1`, scored in one right-padded pass on the prompt's
        keys and values (a row never attends to the padding after it)."""
        width = max(len(r) for r in rows) - front - 1
        if width < 1:  # each row's one reply token came with the prompt's pass
            return
        x = torch.zeros((len(rows), width), dtype=torch.long, device=self.device)
        targets = torch.zeros_like(x)
        for k, row in enumerate(rows):
            rest = row[front:]
            x[k, : len(rest) - 1] = torch.tensor(rest[:-1])
            targets[k, : len(rest) - 1] = torch.tensor(rest[1:])
        cache = DynamicCache()
        cache.layers = [
            RoomyLayer(layer.keys.expand(len(rows), -1, -1, -1), layer.values.expand(len(rows), -1, -1, -1))
            for layer in prompt_cache.layers
        ]
        positions = torch.arange(front, front + width, device=self.device)[None].expand(len(rows), -1)
        logits = self.model(input_ids=x, position_ids=positions, cache=cache, use_cache=True).logits
        lp = -torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
        for k, row in enumerate(rows):
            out[where[k]][front + 1 : len(row)] = lp[k, : len(row) - front - 1].tolist()

    def _merge(self, cache: DynamicCache, mask: torch.Tensor, logits: torch.Tensor) -> None:
        if self._cache is None or not self._rows:
            self._cache = DynamicCache()
            self._cache.layers = [RoomyLayer(layer.keys, layer.values) for layer in cache.layers]
            self._mask, self._logits = mask, logits
            return
        width = max(self._mask.shape[1], mask.shape[1])
        self._cache.layers = [
            RoomyLayer(
                torch.cat([_left_pad(mine.keys, width), _left_pad(theirs.keys, width)]),
                torch.cat([_left_pad(mine.values, width), _left_pad(theirs.values, width)]),
            )
            for mine, theirs in zip(self._cache.layers, cache.layers)
        ]
        self._mask = torch.cat([_left_pad_2d(self._mask, width), _left_pad_2d(mask, width)])
        self._logits = torch.cat([self._logits, logits])

    def _step(self) -> None:
        """Sample one token for every row, retire the finished ones, run the next forward pass."""
        if not self._rows:
            return
        self.clock.stepped(len(self._rows))
        nxt, logprobs = self._sample()
        self.generated_tokens += len(self._rows)
        done = []
        for i, row in enumerate(self._rows):
            token = int(nxt[i])
            row.tokens.append(token)
            row.logprobs.append(float(logprobs[i]))
            request = row.request
            if request.on_token is not None and not request.cancelled:
                request.on_token(row.index, token, row.logprobs[-1])
            stopped = token in request.stop_ids or self._hit_stop_string(row)
            if request.cancelled or stopped or len(row.tokens) >= request.max_tokens:
                done.append(i)
                self._finish(row, stopped)
                if self.prefix_cache is not None and request.n == 1 and not request.cancelled:
                    # a conversation's next turn re-sends this prompt and reply: keep their cache
                    assert self._cache is not None
                    self._keep(request.prompt + row.tokens[:-1], self._cache, i, self._mask[i])
        keep = [i for i in range(len(self._rows)) if i not in set(done)]
        if done:
            self._select(keep)
        if not self._rows:
            self._reset()
            return
        step_ids = nxt[torch.tensor(keep, dtype=torch.long)] if done else nxt
        self._forward(step_ids.to(self.device))

    def _sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self._logits
        raw = logits.log_softmax(-1)
        nxt = torch.empty(len(self._rows), dtype=torch.long)
        by_request: dict[int, list[int]] = {}
        for i, row in enumerate(self._rows):
            by_request.setdefault(id(row.request), []).append(i)
        for rows in by_request.values():
            request = self._rows[rows[0]].request
            index = torch.tensor(rows, dtype=torch.long)
            if request.greedy:
                nxt[index] = logits[index].argmax(-1).cpu()
            else:
                probs = self.filter_logits(logits[index], request.params).softmax(-1)
                nxt[index] = torch.multinomial(probs, 1, generator=request.generator).squeeze(-1).cpu()
        chosen = raw.gather(-1, nxt[:, None].to(raw.device)).squeeze(-1).cpu()
        return nxt, chosen

    def _hit_stop_string(self, row: _Row) -> bool:
        strings = row.request.stop_strings
        if not strings:
            return False
        window = max(len(s) for s in strings) + 4
        text = self.tokenizer.decode(row.tokens[-window:])
        return any(s in text for s in strings)

    def _finish(self, row: _Row, stopped: bool) -> None:
        request = row.request
        request.results[row.index] = Sampled(
            np.asarray(row.tokens, dtype=np.int32), np.asarray(row.logprobs, dtype=np.float32), stopped
        )
        if request.cancelled:
            if not request.future.done():
                request.future.cancel()
        elif len(request.results) == request.n and not request.future.done():
            request.future.set_result([request.results[i] for i in range(request.n)])

    def _select(self, keep: list[int]) -> None:
        assert self._cache is not None
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self._rows = [self._rows[i] for i in keep]
        self._cache.batch_select_indices(index)
        self._mask = self._mask.index_select(0, index)
        self._logits = self._logits.index_select(0, index)
        if self._rows:  # columns that are padding for every remaining row are dropped
            first = int(self._mask.any(0).nonzero()[0])
            if first:
                for layer in self._cache.layers:
                    layer.drop_left(first)
                self._mask = self._mask[:, first:]

    def _forward(self, step_ids: torch.Tensor) -> None:
        positions = self._mask.sum(-1, keepdim=True)  # each row's own count of real tokens
        self._mask = torch.cat([self._mask, torch.ones_like(self._mask[:, :1])], dim=1)
        out = self.model(
            input_ids=step_ids[:, None],
            attention_mask=self._mask,
            position_ids=positions,
            cache=self._cache,
            use_cache=True,
        )
        self._logits = out.logits[:, -1, :].float()
        self.steps += 1

    def _reset(self) -> None:
        self.clock.idle()
        self._rows, self._cache = [], None
        self._mask = torch.zeros(0, 0, dtype=torch.long)
        self._logits = torch.zeros(0, 0)


_LIVE: weakref.WeakSet[ContinuousBatcher] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """A daemon thread still inside a forward pass when the interpreter is torn down makes the C++
    runtime abort the process (exit 134 instead of the run's own exit code): stop them first."""
    for batcher in list(_LIVE):
        batcher.close()


class RoomyLayer(DynamicLayer):
    """A cache layer whose keys and values sit in buffers with room to spare along the length: a
    decode step writes its token in place instead of copying the whole cache (DynamicLayer
    concatenates, which costs every step as much as the cache is long, times the rows)."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self._store(keys, values, keys.shape[2])

    def _store(self, keys: torch.Tensor, values: torch.Tensor, room: int) -> None:
        n = keys.shape[2]
        shape = (keys.shape[0], keys.shape[1], max(room, n + ROOM_STEP), keys.shape[3])
        self._k, self._v = keys.new_empty(shape), values.new_empty(shape)
        self._k[:, :, :n], self._v[:, :, :n] = keys, values
        self._n, self.is_initialized, self.device = n, True, keys.device
        self._view()

    def _view(self) -> None:
        self.keys, self.values = self._k[:, :, : self._n], self._v[:, :, : self._n]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        add = key_states.shape[2]
        if self._n + add > self._k.shape[2]:
            self._store(self.keys, self.values, 2 * (self._n + add))
        self._k[:, :, self._n : self._n + add], self._v[:, :, self._n : self._n + add] = key_states, value_states
        self._n += add
        self._view()
        return self.keys, self.values

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._k, self._v = self._k[indices], self._v[indices]
        self._view()

    def drop_left(self, columns: int) -> None:
        """Forget the first `columns` positions (padding for every row left)."""
        self._k, self._v, self._n = self._k[:, :, columns:], self._v[:, :, columns:], self._n - columns
        self._view()


def _prefix_kv(hits: list[Hit | None], front: int) -> DynamicCache:
    """The rows' cached prefixes as one cache of `front` columns, each right-aligned (zeros before,
    masked out)."""
    sample = next(h.entry for h in hits if h is not None)
    cache = DynamicCache()
    cache.layers = []
    for layer, (k0, v0) in enumerate(zip(sample.keys, sample.values)):
        keys = k0.new_zeros(len(hits), k0.shape[0], front, k0.shape[2])
        values = v0.new_zeros(len(hits), v0.shape[0], front, v0.shape[2])
        for i, hit in enumerate(hits):
            if hit is not None:
                keys[i, :, front - hit.length :] = hit.entry.keys[layer][:, : hit.length]
                values[i, :, front - hit.length :] = hit.entry.values[layer][:, : hit.length]
        cache.layers.append(RoomyLayer(keys, values))
    return cache


def _left_pad(t: torch.Tensor, width: int) -> torch.Tensor:
    """[rows, heads, length, dim] padded with zeros on the left of the length axis to `width`."""
    missing = width - t.shape[2]
    if missing == 0:
        return t
    pad = torch.zeros(t.shape[0], t.shape[1], missing, t.shape[3], dtype=t.dtype, device=t.device)
    return torch.cat([pad, t], dim=2)


def _left_pad_2d(t: torch.Tensor, width: int) -> torch.Tensor:
    missing = width - t.shape[1]
    if missing == 0:
        return t
    return torch.cat([torch.zeros(t.shape[0], missing, dtype=t.dtype, device=t.device), t], dim=1)
