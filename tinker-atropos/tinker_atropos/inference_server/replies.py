"""A reply's text as clients read it: cut at the first stop string, and with tools offered, the Hermes
`<tool_call>` blocks in it as OpenAI `tool_calls` (as vLLM's hermes tool parser does).

The whole reply and the streamed one are built by the same functions, so a client reads the same
message either way (`streaming.py` sends, as it goes, only text these functions cannot take back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tinker_atropos.agent.chat_format import openai_tool_calls
from tinker_atropos.agent.tool_calls import parse_tool_calls

TOOL_CALL_OPEN = "<tool_call>"


@dataclass(frozen=True)
class ChatReply:
    """One choice's assistant message: its text, or the tool calls parsed out of it."""

    content: str | None
    tool_calls: list[dict[str, Any]] | None
    finish_reason: str

    def message(self) -> dict[str, Any]:
        if self.tool_calls is None:
            return {"role": "assistant", "content": self.content}
        return {"role": "assistant", "content": self.content, "tool_calls": self.tool_calls}


def chat_reply(text: str, finish_reason: str, parse_tools: bool) -> ChatReply:
    """The message for a reply's `text`: well-formed calls become tool_calls (the prose around them,
    stripped but for its leading whitespace, stays the content); anything else stays text."""
    if parse_tools:
        parsed = parse_tool_calls(text)
        if parsed.calls and not parsed.errors:
            lead = text[: len(text) - len(text.lstrip())]
            content = lead + parsed.content if parsed.content else None
            return ChatReply(content, openai_tool_calls(parsed.calls), "tool_calls")
    return ChatReply(text, None, finish_reason)


def stop_cut(text: str, stops: tuple[str, ...]) -> int | None:
    """Where the first stop string starts in `text` (None: nowhere)."""
    hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
    return min(hits) if hits else None


def settled(text: str, stops: tuple[str, ...], parse_tools: bool) -> str:
    """The start of `text` (a reply so far) that the whole reply's content will begin with whatever
    comes next: held back are an unfinished UTF-8 character, a tail that may grow into a stop string
    or a `<tool_call>`, everything from a `<tool_call>` on, and (with tools) trailing whitespace."""
    text = text.rstrip("\ufffd")
    cut = stop_cut(text, stops)
    text = text[:cut] if cut is not None else text[: len(text) - _partial_tail(text, stops)]
    if parse_tools:
        start = text.find(TOOL_CALL_OPEN)
        text = text[:start] if start >= 0 else text[: len(text) - _partial_tail(text, (TOOL_CALL_OPEN,))]
        text = text.rstrip()
    return text


def _partial_tail(text: str, marks: tuple[str, ...]) -> int:
    """The length of the longest tail of `text` that is a proper start of one of `marks`."""
    longest = 0
    for mark in marks:
        for k in range(min(len(mark) - 1, len(text)), longest, -1):
            if text.endswith(mark[:k]):
                longest = k
                break
    return longest


def cut_tokens(tokens: list[int], cut: int, decode: Callable[[list[int]], str]) -> int:
    """How many of `tokens` a reply cut at character `cut` keeps: the shortest prefix whose text
    reaches past the cut (so the token that starts a stop string is kept, as it was sampled)."""
    lo, hi = 1, len(tokens)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(decode(tokens[:mid])) > cut:
            hi = mid
        else:
            lo = mid + 1
    return lo
