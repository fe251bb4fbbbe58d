"""What the server sampled for each episode, kept under the episode's api key, so an environment that
runs a harness it cannot see inside (Hermes, `hermes -z`) trains on the exact ids, never on its text.

A chat or completions request whose bearer key starts with `EPISODE_KEY_PREFIX` is one call of that
episode. Its record holds the prompt ids as the sampler was fed them, and for each of its n choices
every sampled id (the stop or end-of-turn token included when it was sampled) with its logprob, how
many of those ids the reply was made from (`returned_tokens`: a request `stop` string cuts the text,
and the ids past the token where it starts are sampled but neither returned nor in the next prompt),
the finish reason the client was told, and the weights that sampled it (`SamplerHolder`'s version:
a swap changes it, a relabel does not). A client gone before its reply was whole leaves a call with
what had been sampled and finish reason "cancelled" (none for an unstreamed request: its ids never
reached this layer). A request that failed is not recorded, nor a streamed one whose client left
between its last sampled id and its reply. Requests without such a key cost nothing.

Bounded: `max_keys` episodes and `max_tokens` ids in all (a call's prompt that extends the previous
call's prompt and reply is stored as its new ids only); the least recently written episode goes
first, counted, and its key is remembered as evicted so a later GET says so instead of answering a
partial episode.
"""

from __future__ import annotations

import asyncio
import re
from array import array
from collections import OrderedDict
from collections.abc import AsyncGenerator, Awaitable
from contextlib import aclosing
from dataclasses import dataclass, field
from itertools import count
from typing import Any, TypeVar

from tinker_atropos.inference_server.engine import Generation, Token

EPISODE_KEY_PREFIX = "episode-"
EPISODE_KEY = re.compile(r"episode-[A-Za-z0-9_-]{1,120}")
CANCELLED = "cancelled"
MAX_KEYS = 4096
MAX_TOKENS = 8_000_000  # ids kept in all, 4 bytes each (and 4 for a completion id's logprob)
T = TypeVar("T")


class BadEpisodeKey(ValueError):
    """A bearer key with the episode prefix that is not a well-formed episode key (HTTP 400)."""


def episode_key(authorization: str | None) -> str | None:
    """The episode key of a request's `Authorization` header; None where it is not an episode's."""
    if not authorization:
        return None
    scheme, _, key = authorization.partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key.startswith(EPISODE_KEY_PREFIX):
        return None
    if not EPISODE_KEY.fullmatch(key):
        raise BadEpisodeKey(
            f"api key {key[:40]!r} starts with {EPISODE_KEY_PREFIX!r} but is not an episode key: "
            f"use {EPISODE_KEY_PREFIX}<1-120 letters, digits, '-' or '_'>, e.g. {EPISODE_KEY_PREFIX}0f3a9c"
        )
    return key


@dataclass(frozen=True)
class Weights:
    """The weights that sampled a call: `version` tells them apart (SamplerHolder counts its swaps);
    `label` (step-000003, final) and `path` (the adapter folder) name them for a reader."""

    version: int
    label: str | None
    path: str | None


@dataclass(frozen=True)
class _Choice:
    completion_ids: array[int]
    logprobs: array[float]
    returned_tokens: int
    finish_reason: str


@dataclass(frozen=True)
class _Call:
    index: int  # start order: the episode's calls are listed by it
    endpoint: str
    streamed: bool
    shared: int  # the prompt's first ids, those of the previous stored call's prompt + first reply
    prompt_tail: array[int]
    choices: tuple[_Choice, ...]
    weights: Weights

    @property
    def stored(self) -> int:
        return len(self.prompt_tail) + sum(len(c.completion_ids) for c in self.choices)


def _base(call: _Call, prompt: array[int]) -> array[int]:
    """What the next call's prompt usually starts with: this prompt and its first reply as returned."""
    if not call.choices:
        return prompt
    first = call.choices[0]
    return prompt + first.completion_ids[: first.returned_tokens]


@dataclass
class _Episode:
    calls: list[_Call] = field(default_factory=list)
    last_base: array[int] = field(default_factory=lambda: array("i"))  # _base of the last stored call
    tokens: int = 0


class EpisodeLog:
    """Each episode key's calls, in memory, bounded (see the module's docstring)."""

    def __init__(self, max_keys: int = MAX_KEYS, max_tokens: int = MAX_TOKENS) -> None:
        self.max_keys = max_keys
        self.max_tokens = max_tokens
        self._episodes: OrderedDict[str, _Episode] = OrderedDict()
        self._evicted_keys: OrderedDict[str, None] = OrderedDict()
        self._order = count()
        self.tokens = 0
        self.evicted = 0  # episodes dropped for room, not taken

    def recorder(
        self, key: str | None, endpoint: str, prompts: list[list[int]], n: int, weights: Weights, streamed: bool
    ) -> CallRecorder | None:
        """A recorder for one request (one call per prompt), taken as it starts; None without a key."""
        if key is None:
            return None
        return CallRecorder(self, key, endpoint, prompts, n, weights, streamed, next(self._order))

    def _store(
        self,
        key: str,
        index: int,
        endpoint: str,
        streamed: bool,
        prompt: list[int],
        choices: tuple[_Choice, ...],
        w: Weights,
    ) -> None:
        if key in self._evicted_keys:
            return  # the episode's first calls are gone: a partial one is never answered
        episode = self._episodes.get(key) or _Episode()
        ids = array("i", prompt)
        base = episode.last_base
        shared = len(base) if base and ids[: len(base)] == base else 0
        call = _Call(index, endpoint, streamed, shared, ids[shared:], choices, w)
        episode.calls.append(call)
        episode.last_base = _base(call, ids)
        episode.tokens += call.stored
        self.tokens += call.stored
        self._episodes[key] = episode
        self._episodes.move_to_end(key)
        while self._episodes and (len(self._episodes) > self.max_keys or self.tokens > self.max_tokens):
            old, dropped = self._episodes.popitem(last=False)
            self.tokens -= dropped.tokens
            self.evicted += 1
            self._evicted_keys[old] = None
            while len(self._evicted_keys) > self.max_keys:
                self._evicted_keys.popitem(last=False)

    def answer(self, key: str) -> dict[str, Any]:
        """`GET /episodes/{key}`: the key, its calls in start order, and whether it was evicted."""
        episode = self._episodes.get(key)
        calls: list[dict[str, Any]] = []
        prompt = array("i")
        base = array("i")
        for call in episode.calls if episode is not None else []:
            prompt = base[: call.shared] + call.prompt_tail
            base = _base(call, prompt)
            calls.append(_record(call, prompt))
        calls.sort(key=lambda c: c["index"])
        return {"key": key, "calls": calls, "evicted": key in self._evicted_keys}

    def drop(self, key: str) -> int:
        """`DELETE /episodes/{key}`: its calls forgotten; how many there were."""
        self._evicted_keys.pop(key, None)
        episode = self._episodes.pop(key, None)
        if episode is None:
            return 0
        self.tokens -= episode.tokens
        return len(episode.calls)

    def stats(self) -> dict[str, int]:
        """For /health: episodes held, ids held, episodes evicted."""
        return {"keys": len(self._episodes), "tokens": self.tokens, "evicted": self.evicted}


def _record(call: _Call, prompt: array[int]) -> dict[str, Any]:
    return {
        "index": call.index,
        "endpoint": call.endpoint,
        "streamed": call.streamed,
        "prompt_ids": prompt.tolist(),
        "n": len(call.choices),
        "choices": [
            {
                "completion_ids": c.completion_ids.tolist(),
                "logprobs": c.logprobs.tolist(),
                "returned_tokens": c.returned_tokens,
                "finish_reason": c.finish_reason,
            }
            for c in call.choices
        ],
        "weights": {"version": call.weights.version, "label": call.weights.label, "path": call.weights.path},
    }


@dataclass
class CallRecorder:
    """One request's recording: `finished` with its replies, or `cancelled` with what was sampled."""

    log: EpisodeLog
    key: str
    endpoint: str
    prompts: list[list[int]]
    n: int
    weights: Weights
    streamed: bool
    index: int
    done: bool = False

    def finished(self, sampled: list[Generation], returned: list[Generation], reasons: list[str]) -> None:
        """`sampled`: every choice as the sampler gave it (prompt by prompt, n each); `returned`: the
        same cut at the request's stop strings; `reasons`: the finish reason each choice was given."""
        choices = [
            _Choice(array("i", s.tokens), array("f", s.logprobs), len(r.tokens), reason)
            for s, r, reason in zip(sampled, returned, reasons)
        ]
        self._store(choices)

    def cancelled(self, tokens: list[list[int]] | None = None, logprobs: list[list[float]] | None = None) -> None:
        """The client went away: each choice's ids sampled so far (none given: none known)."""
        tokens = tokens or [[] for _ in range(self.n * len(self.prompts))]
        logprobs = logprobs or [[] for _ in tokens]
        self._store([_Choice(array("i", t), array("f", lp), 0, CANCELLED) for t, lp in zip(tokens, logprobs)])

    def _store(self, choices: list[_Choice]) -> None:
        if self.done:
            return
        self.done = True
        for i, prompt in enumerate(self.prompts):
            mine = tuple(choices[i * self.n : (i + 1) * self.n])
            self.log._store(self.key, self.index, self.endpoint, self.streamed, prompt, mine, self.weights)

    async def watch(
        self, events: AsyncGenerator[Token | list[Generation], None]
    ) -> AsyncGenerator[Token | list[Generation], None]:
        """`events` passed on, their tokens kept: closed before the generations came (the client
        gone), the call is recorded as cancelled with them."""
        tokens: list[list[int]] = [[] for _ in range(self.n)]
        logprobs: list[list[float]] = [[] for _ in range(self.n)]
        whole = False
        try:
            async with aclosing(events):
                async for event in events:
                    if isinstance(event, Token):
                        tokens[event.index].append(event.token)
                        logprobs[event.index].append(event.logprob)
                    else:
                        whole = True
                    yield event
        except (GeneratorExit, asyncio.CancelledError):
            if not whole:
                self.cancelled(tokens, logprobs)
            raise


async def sampled(recorder: CallRecorder | None, work: Awaitable[T]) -> T:
    """`await work` (an unstreamed request's sampling); cancelled (the client gone), its call is
    recorded as cancelled, with no ids."""
    try:
        return await work
    except asyncio.CancelledError:
        if recorder is not None:
            recorder.cancelled()
        raise


def watched(
    recorder: CallRecorder | None, events: AsyncGenerator[Token | list[Generation], None]
) -> AsyncGenerator[Token | list[Generation], None]:
    """A streamed request's events, watched by its recorder where it has one."""
    return events if recorder is None else recorder.watch(events)
