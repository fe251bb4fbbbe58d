"""Supervised examples are rollouts with scripted turns: a file's conversation renders to exactly
the tokens of the same conversation sampled as a rollout, only the policy's tokens are trained, and a
demonstration is kept only where the environment's reward passes."""

from __future__ import annotations

import json

import pytest
from agent_helpers import close_env, make_env

from tinker_atropos.agent.loop import PROMPT_MASK
from tinker_atropos.agent.tool_calls import ToolCall, format_tool_call
from tinker_atropos.environments.tool_calculator import ToolCalculatorEnv
from tinker_atropos.sft.conversations import read_conversations
from tinker_atropos.sft.examples import Example, Refused, from_conversation, from_demonstration
from tinker_atropos.sft.steps import batches, example_datum

pytestmark = pytest.mark.anyio


def calculator_call(expression: str) -> str:
    return format_tool_call(ToolCall("calculator", {"expression": expression}, "call_1"))


def as_jsonl_line(messages: list[dict]) -> str:
    """A rollout's transcript as OpenAI `messages`, as Atropos' process mode writes it."""
    return json.dumps({"messages": messages}) + "\n"


async def test_a_file_conversation_has_exactly_the_tokens_of_the_same_rollout(scripted, tiny_path, tmp_path) -> None:
    url, sampler = scripted
    env = make_env(ToolCalculatorEnv, url, tiny_path, group_size=1)
    try:
        await env.setup()
        item = env.train_items[0]
        sampler.script = [calculator_call(item.expression), str(item.answer)]
        rolled, _ = await env.rollout(item)
        path = tmp_path / "conversations.jsonl"
        path.write_text(as_jsonl_line(rolled.messages))
        (conversation,) = read_conversations(path, env._resolve_tools_for_group()[0]).kept
        example = await from_conversation(env, conversation)
    finally:
        await close_env(env)
    assert isinstance(example, Example) and rolled.trace is not None
    assert example.tokens == rolled.trace.tokens and example.masks == rolled.trace.masks
    trained = [t for t, m in zip(example.tokens, example.masks, strict=True) if m != PROMPT_MASK]
    eos = env.tokenizer.eos_token_id
    assert trained.count(eos) == 2 and trained[-1] == eos  # each turn's end is trained
    assert env.tokenizer.decode([t for t in trained if t != eos]) == calculator_call(item.expression) + str(item.answer)


async def test_a_demonstration_is_kept_only_where_the_reward_passes(scripted, tiny_path) -> None:
    url, _ = scripted
    env = make_env(ToolCalculatorEnv, url, tiny_path, group_size=1)
    try:
        await env.setup()
        kept = await from_demonstration(env, env.train_items[0], "item 0", min_score=1.0)
        refused = await from_demonstration(env, env.train_items[1], "item 1", min_score=1.5)
        env.config.max_token_length = 40
        too_long = await from_demonstration(env, env.train_items[2], "item 2", min_score=0.0)
    finally:
        await close_env(env)
    assert isinstance(kept, Example) and kept.tool_calls == 1 and kept.source == "demonstrations"
    assert isinstance(refused, Refused) and "under min_score 1.5" in refused.reason
    assert isinstance(too_long, Refused) and "longer than the context" in too_long.reason


def test_only_the_policy_tokens_weigh_in_the_loss() -> None:
    example = Example("file", "line 1", [5, 6, 7, 8, 9], [PROMPT_MASK, PROMPT_MASK, 7, 8, PROMPT_MASK], 0)
    datum = example_datum(example)
    assert datum.model_input.to_ints() == [5, 6, 7, 8]
    assert list(datum.loss_fn_inputs["target_tokens"].data) == [6, 7, 8, 9]
    assert list(datum.loss_fn_inputs["weights"].data) == [0.0, 1.0, 1.0, 0.0]
    drawn = [
        e.origin for batch in batches([example, Example("file", "line 2", [1, 2], [1, 2], 0)], 3, 2) for e in batch
    ]
    assert sorted(drawn[:2]) == ["line 1", "line 2"] and len(drawn) == 6  # each once per epoch
