"""Model calls for the HTTP layer: tinker.types in, plain generations out, never on the server loop.

Sampler coroutines run on one background event loop in its own thread. A backend whose async
methods compute synchronously (torch on CPU) therefore never stalls the HTTP loop (health checks
keep answering), and a truly async backend (the Tinker SDK) still runs its requests concurrently.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from tinker import types

from tinker_atropos.backends.base import SamplingBackend

T = TypeVar("T")


@dataclass(frozen=True)
class SampleSpec:
    """Sampling settings common to the OpenAI, sglang and vllm request shapes."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    seed: int | None = None
    stop: tuple[str, ...] | None = None

    def to_tinker(self) -> types.SamplingParams:
        return types.SamplingParams(
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=self.seed,
            stop=list(self.stop) if self.stop is not None else None,
        )


@dataclass(frozen=True)
class Generation:
    tokens: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" | "length"


class SamplerLoop:
    """A private event loop thread that runs sampler coroutines."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sampler-loop", daemon=True)
        self._thread.start()

    async def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        """Run `factory()` on the sampler loop and await its result from the caller's loop."""

        async def call() -> T:
            return await factory()

        future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            future.cancel()
            raise

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()


def normalize_stop(
    stop: str | Sequence[str] | None,
    stop_token_ids: Sequence[int] | None,
    decode: Callable[[list[int]], str],
    eos_text: str | None,
) -> tuple[str, ...] | None:
    """Stop strings for tinker's `stop`, with OpenAI/sglang/vllm semantics.

    Those APIs stop at EOS *and* at the given stops; tinker's `stop` replaces EOS and is all
    strings or all ids. So a request with any stop becomes strings, EOS's text included.
    """
    strings = [stop] if isinstance(stop, str) else [s for s in (stop or []) if s]
    strings += [decode([int(i)]) for i in (stop_token_ids or [])]
    if not strings:
        return None
    if eos_text and eos_text not in strings:
        strings.append(eos_text)
    return tuple(strings)


async def sample(
    loop: SamplerLoop,
    sampler: SamplingBackend,
    prompt_tokens: list[int],
    n: int,
    spec: SampleSpec,
) -> list[Generation]:
    """`n` completions of `prompt_tokens` with per-token logprobs."""
    if not prompt_tokens:
        raise ValueError("the prompt is empty")
    params = spec.to_tinker()
    response = await loop.run(lambda: sampler.sample_async(types.ModelInput.from_ints(prompt_tokens), n, params))
    return _generations(response)


def _generations(response: types.SampleResponse) -> list[Generation]:
    out = []
    for seq in response.sequences:
        tokens = [int(t) for t in seq.tokens]
        logprobs = seq.logprobs
        if logprobs is None or len(logprobs) != len(tokens):
            raise RuntimeError("the sampler returned no per-token logprobs")
        out.append(Generation(tokens, [float(x) for x in logprobs], str(seq.stop_reason)))
    return out


@dataclass(frozen=True)
class Token:
    """One token of a streamed reply, as it is sampled."""

    index: int  # which of the request's n samples
    token: int
    logprob: float


async def sample_streamed(
    loop: SamplerLoop,
    sampler: SamplingBackend,
    prompt_tokens: list[int],
    n: int,
    spec: SampleSpec,
) -> AsyncGenerator[Token | list[Generation], None]:
    """`sample`, told token by token: each Token as it is sampled, then the generations. A sampler
    that cannot tell its tokens as it goes (the Tinker SDK's) yields them all once it is done.
    Closing the iterator early (a client gone) cancels the sampling, and the sampler drops its rows."""
    if not prompt_tokens:
        raise ValueError("the prompt is empty")
    queue: asyncio.Queue[Token] = asyncio.Queue()
    here = asyncio.get_running_loop()

    def told(index: int, token: int, logprob: float) -> None:  # on the sampler's thread
        here.call_soon_threadsafe(queue.put_nowait, Token(index, token, logprob))

    params, model_input = spec.to_tinker(), types.ModelInput.from_ints(prompt_tokens)
    streams = bool(getattr(sampler, "streams_tokens", False))
    if streams:
        call = lambda: sampler.sample_async(model_input, n, params, on_token=told)  # type: ignore[call-arg]  # noqa: E731
    else:
        call = lambda: sampler.sample_async(model_input, n, params)  # noqa: E731
    task = asyncio.ensure_future(loop.run(call))
    try:
        while not task.done():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
        # the sampler told every token before its answer came back (both hop onto this loop in order)
        while not queue.empty():
            yield queue.get_nowait()
        generations = _generations(task.result())
        if not streams:
            for index, gen in enumerate(generations):
                for token, logprob in zip(gen.tokens, gen.logprobs):
                    yield Token(index, token, logprob)
        yield generations
    finally:
        if not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def prompt_logprobs(loop: SamplerLoop, sampler: SamplingBackend, prompt_tokens: list[int]) -> list[float | None]:
    """Logprob of each prompt token given the ones before it (None for the first)."""
    if not prompt_tokens:
        raise ValueError("the prompt is empty")
    values = await loop.run(lambda: sampler.compute_logprobs_async(types.ModelInput.from_ints(prompt_tokens)))
    return [None if v is None or math.isnan(v) else float(v) for v in values]
