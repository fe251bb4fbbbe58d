"""The inference server's memory of its own replies (inference_server/conversations.py): a conversation
that comes back with them is prompted with the ids that were sampled, tool calls included, whatever
the client did to the message on its round trip."""

from __future__ import annotations

import json
from typing import Any

import pytest
from transformers import AutoTokenizer

from tinker_atropos.agent.chat_format import ChatScaffold
from tinker_atropos.inference_server.conversations import ConversationCache
from tinker_atropos.models import ensure_model

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]
QUESTION = [{"role": "user", "content": "What is 1 + 2?"}]
CALL_TEXT = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return AutoTokenizer.from_pretrained(str(ensure_model("smollm2-135m")))  # BPE: a text has many splits


def one_token_per_character(tokenizer: Any, text: str) -> list[int]:
    """A split of `text` the tokenizer would never make itself (a sampler can sample it)."""
    return [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(c))[0] for c in text]


def test_a_tool_call_that_comes_back_is_prompted_with_the_ids_sampled(tokenizer: Any) -> None:
    scaffold, cache = ChatScaffold(tokenizer, TOOLS), ConversationCache()
    prompt = cache.prompt_tokens(scaffold, QUESTION)
    assert prompt == scaffold.prompt_tokens(QUESTION)  # nothing remembered yet: the template's render
    sampled = [*one_token_per_character(tokenizer, CALL_TEXT), tokenizer.convert_tokens_to_ids("<|im_end|>")]
    assert tokenizer.decode(sampled[:-1]) == CALL_TEXT and sampled[:-1] != scaffold.encode(CALL_TEXT)
    reply = {  # as the server answers it: the call parsed out of the text
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}
        ],
    }
    cache.remember(QUESTION, reply, TOOLS, prompt, sampled)
    back = {  # as a client sends it back: content "", arguments re-serialized, an extra field
        "role": "assistant",
        "content": "",
        "reasoning_content": None,
        "tool_calls": [{"id": "call_0", "type": "function", "function": {"name": "add", "arguments": '{"a":1,"b":2}'}}],
    }
    result = {"role": "tool", "tool_call_id": "call_0", "content": "3"}
    following = cache.prompt_tokens(scaffold, [*QUESTION, back, result])
    assert following[: len(prompt) + len(sampled)] == [*prompt, *sampled]  # exactly what the model produced
    rest = tokenizer.decode(following[len(prompt) + len(sampled) :])
    assert "<tool_response>\n3\n</tool_response>" in rest and rest.endswith("<|im_start|>assistant\n"), rest
    assert not rest.startswith("<|im_end|>")  # the end of turn it sampled is not added a second time


def test_an_edited_conversation_is_rendered_from_its_text(tokenizer: Any) -> None:
    scaffold, cache = ChatScaffold(tokenizer), ConversationCache()
    prompt = cache.prompt_tokens(scaffold, QUESTION)
    sampled = one_token_per_character(tokenizer, "3")
    cache.remember(QUESTION, {"role": "assistant", "content": "3"}, None, prompt, sampled)
    edited = [*QUESTION, {"role": "assistant", "content": "three"}, {"role": "user", "content": "Sure?"}]
    assert cache.prompt_tokens(scaffold, edited) == scaffold.prompt_tokens(edited)  # not a reply it gave


def test_the_oldest_conversations_go_first_past_the_token_bound(tokenizer: Any) -> None:
    scaffold = ChatScaffold(tokenizer)
    conversations = [[{"role": "user", "content": f"Question {i}: {json.dumps(list(range(5)))}"}] for i in range(4)]
    prompts = [scaffold.prompt_tokens(m) for m in conversations]
    cache = ConversationCache(max_tokens=2 * max(len(p) for p in prompts) + 40)  # room for two
    sampled = one_token_per_character(tokenizer, "okay")  # what the text alone never gives back
    for messages, prompt in zip(conversations, prompts):
        cache.remember(messages, {"role": "assistant", "content": "okay"}, None, prompt, sampled)

    def next_turn(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [*messages, {"role": "assistant", "content": "okay"}, {"role": "user", "content": "and?"}]

    newest = cache.prompt_tokens(scaffold, next_turn(conversations[-1]))
    assert newest[: len(prompts[-1]) + len(sampled)] == [*prompts[-1], *sampled]  # remembered
    oldest = next_turn(conversations[0])
    assert cache.prompt_tokens(scaffold, oldest) == scaffold.prompt_tokens(oldest)  # forgotten: rendered
