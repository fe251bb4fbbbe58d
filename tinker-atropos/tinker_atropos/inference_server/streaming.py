"""Streamed replies (`stream: true`): OpenAI's server-sent events, as chunks of the text the model
samples, for /v1/chat/completions and /v1/completions.

Each choice's text is sent as soon as the whole reply cannot take it back (`replies.settled`), and what
is left once sampling ends is sent from the same whole reply the unstreamed answer gives, so the text,
tool calls, finish reasons and logprobs a client puts together equal that answer's. A client that goes
away closes the generator, which cancels the sampling (`engine.sample_streamed`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from tinker_atropos.inference_server.engine import Generation, Token
from tinker_atropos.inference_server.replies import ChatReply, settled

log = logging.getLogger("tinker_atropos.inference_server")
DONE = "data: [DONE]\n\n"
# what a streamed reply needs of the served model's tokenizer: text of tokens, a token's own text
Decode = Callable[[list[int]], str]


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


@dataclass
class ChoiceText:
    """One choice's tokens as they come, and how much of them has been sent."""

    stops: tuple[str, ...]
    parse_tools: bool
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)  # the text's length after each token
    sent: str = ""
    sent_tokens: int = 0  # tokens whose logprobs were sent (those wholly inside the text sent)
    diverged: bool = False  # the text so far no longer starts with what was sent: wait for the end

    def feed(self, token: Token, decode: Decode) -> tuple[str, int, int] | None:
        """Take one token; the new text to send with the token range its logprobs cover, or None."""
        self.tokens.append(token.token)
        self.logprobs.append(token.logprob)
        text = decode(self.tokens)
        self.ends.append(len(text))
        ready = settled(text, self.stops, self.parse_tools)
        if self.diverged or len(ready) <= len(self.sent):
            return None
        if not ready.startswith(self.sent):
            self.diverged = True
            return None
        delta, self.sent = ready[len(self.sent) :], ready
        first = self.sent_tokens
        while self.sent_tokens < len(self.ends) and self.ends[self.sent_tokens] <= len(ready):
            self.sent_tokens += 1
        return delta, first, self.sent_tokens

    def rest(self, whole: str, kept: int) -> tuple[str, int, int]:
        """What is left to send of the whole reply's text, and of its `kept` tokens."""
        if not whole.startswith(self.sent):
            log.warning("a streamed reply diverged from its whole text: sent %r, whole %r", self.sent, whole)
        first, self.sent_tokens = min(self.sent_tokens, kept), kept
        return whole[len(self.sent) :] if whole.startswith(self.sent) else "", first, kept


@dataclass(frozen=True)
class StreamHead:
    """What every chunk of one streamed answer carries."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))


Finish = Callable[[list[Generation]], tuple[list[Generation], list[ChatReply]]]
Logprobs = Callable[[list[int], list[float]], dict[str, Any]]


async def chat_stream(
    events: AsyncGenerator[Token | list[Generation], None],
    head: StreamHead,
    *,
    n: int,
    decode: Decode,
    stops: tuple[str, ...],
    parse_tools: bool,
    finish: Finish,
    logprobs: Logprobs | None,
    usage: Callable[[list[Generation]], dict[str, int]] | None,
) -> AsyncIterator[str]:
    """A chat completion's chunks: the role, content deltas, then each choice's rest (its tool calls
    among it), its finish reason, the usage (when asked), [DONE]. `finish` makes the whole replies."""

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": head.id, "object": "chat.completion.chunk", "created": head.created, "model": head.model}
        return sse({**body, "choices": choices, **extra})

    def choice(index: int, delta: dict[str, Any], state: ChoiceText, span: tuple[int, int]) -> dict[str, Any]:
        lps = None
        if logprobs is not None:
            lps = logprobs(state.tokens[span[0] : span[1]], state.logprobs[span[0] : span[1]])
        return {"index": index, "delta": delta, "logprobs": lps, "finish_reason": None}

    states = [ChoiceText(stops, parse_tools) for _ in range(n)]
    role = {"role": "assistant", "content": ""}
    yield chunk([{"index": i, "delta": role, "logprobs": None, "finish_reason": None} for i in range(n)])
    gens: list[Generation] = []
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Token):
                state = states[event.index]
                fed = state.feed(event, decode)
                if fed is not None:
                    yield chunk([choice(event.index, {"content": fed[0]}, state, fed[1:])])
            else:
                gens = event
    kept, replies = finish(gens)
    for i, (gen, reply) in enumerate(zip(kept, replies)):
        text, first, last = states[i].rest(reply.content or "", len(gen.tokens))
        delta: dict[str, Any] = {"content": text} if text else {}
        if reply.tool_calls:
            delta["tool_calls"] = [{"index": j, **call} for j, call in enumerate(reply.tool_calls)]
        if delta or (logprobs is not None and last > first):
            yield chunk([choice(i, delta, states[i], (first, last))])
        yield chunk([{"index": i, "delta": {}, "logprobs": None, "finish_reason": reply.finish_reason}])
    if usage is not None:
        yield chunk([], usage=usage(kept))
    yield DONE


async def completion_stream(
    events: AsyncGenerator[Token | list[Generation], None],
    head: StreamHead,
    *,
    n: int,
    decode: Decode,
    stops: tuple[str, ...],
    finish: Callable[[list[Generation]], tuple[list[Generation], list[str]]],
    logprobs: Callable[[list[int], list[float], int], dict[str, Any]] | None,
    usage: Callable[[list[Generation]], dict[str, int]] | None,
) -> AsyncIterator[str]:
    """A text completion's chunks: text deltas, each choice's rest and finish reason, the usage, [DONE]."""

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": head.id, "object": "text_completion", "created": head.created, "model": head.model}
        return sse({**body, "choices": choices, **extra})

    def choice(index: int, text: str, state: ChoiceText, span: tuple[int, int], reason: str | None) -> dict[str, Any]:
        lps = None
        if logprobs is not None:
            offset = len(decode(state.tokens[: span[0]])) if span[0] else 0
            lps = logprobs(state.tokens[span[0] : span[1]], state.logprobs[span[0] : span[1]], offset)
        return {"index": index, "text": text, "logprobs": lps, "finish_reason": reason}

    states = [ChoiceText(stops, False) for _ in range(n)]
    gens: list[Generation] = []
    async with aclosing(events):
        async for event in events:
            if isinstance(event, Token):
                state = states[event.index]
                fed = state.feed(event, decode)
                if fed is not None:
                    yield chunk([choice(event.index, fed[0], state, fed[1:], None)])
            else:
                gens = event
    kept, texts = finish(gens)
    for i, (gen, whole) in enumerate(zip(kept, texts)):
        text, first, last = states[i].rest(whole, len(gen.tokens))
        yield chunk([choice(i, text, states[i], (first, last), gen.finish_reason)])
    if usage is not None:
        yield chunk([], usage=usage(kept))
    yield DONE
