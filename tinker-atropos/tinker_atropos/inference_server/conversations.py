"""The server's own replies, remembered by their text, so a conversation that comes back with them
is prompted with the tokens that were sampled, not a re-tokenization of their text.

A client (a verifiers environment, any multi-turn chat loop) sends the whole conversation each
turn. Re-tokenizing a reply's text does not always give back the sampled ids: bytes that are not
valid UTF-8 decode to U+FFFD, a sampled special token is dropped from the text, a BPE split is not
the canonical one. The next prompt then differs from what the model produced, and training on the
episode would credit tokens it never sampled. So each reply is kept with its exact prompt + reply
ids; a request whose messages start with a remembered conversation (up to that reply) is prompted
with those ids and the template's continuation after them (ChatScaffold.continuation), which is
what vLLM-style token-in/token-out servers give trainers.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections import OrderedDict
from typing import Any

from tinker_atropos.agent.chat_format import ChatScaffold, TemplateError

MAX_TOKENS = 4_000_000  # tokens kept in all (4 bytes each): the oldest conversations go first


def _message_key(message: dict[str, Any]) -> Any:
    """What identifies a message across a client's round trip: role, text, tool calls (name and
    arguments, parsed), tool result ids; not the extra fields clients add (None reasoning, ids)."""
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        calls.append([fn.get("name"), args])
    return [message.get("role"), message.get("content") or "", calls]


def conversation_key(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    data = json.dumps([[_message_key(m) for m in messages], tools or []], sort_keys=True, default=str)
    return hashlib.sha256(data.encode()).hexdigest()


class ConversationCache:
    """Conversations ending in one of this server's replies -> their exact token ids."""

    def __init__(self, max_tokens: int = MAX_TOKENS) -> None:
        self.max_tokens = max_tokens
        self._ids: OrderedDict[str, tuple[array[int], int]] = OrderedDict()  # key -> (ids, reply length)
        self._tokens = 0

    def remember(
        self,
        messages: list[dict[str, Any]],
        reply: dict[str, Any],
        tools: list[dict[str, Any]] | None,
        prompt: list[int],
        sampled: list[int],
    ) -> None:
        key = conversation_key([*messages, reply], tools)
        if key in self._ids:
            return
        ids = array("i", [*prompt, *sampled])
        self._ids[key] = (ids, len(sampled))
        self._tokens += len(ids)
        while self._tokens > self.max_tokens and self._ids:
            _, (old, _) = self._ids.popitem(last=False)
            self._tokens -= len(old)

    def prompt_tokens(self, scaffold: ChatScaffold, messages: list[dict[str, Any]]) -> list[int]:
        """The prompt for `messages`: after the longest remembered conversation they start with,
        its exact ids and the template's continuation; else the whole conversation rendered."""
        for end in range(len(messages) - 1, 0, -1):
            if messages[end - 1].get("role") != "assistant":
                continue
            key = conversation_key(messages[:end], scaffold.tools)
            if (hit := self._ids.get(key)) is None:
                continue
            self._ids.move_to_end(key)
            ids, reply_len = hit
            sampled = list(ids[len(ids) - reply_len :])
            try:
                return [*ids, *scaffold.continuation(messages[:end], messages[end:], sampled)]
            except TemplateError:
                break  # this template re-renders earlier turns: only the text can be sent
        return scaffold.prompt_tokens(messages)
