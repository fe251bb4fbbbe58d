"""The agent loop through the real inference server and atroposlib's managed server (phase 2)
and its OpenAI chat endpoint (phase 1), with a scripted policy so every path is exact."""

from __future__ import annotations

import json

import pytest
from agent_helpers import close_env, make_env

from tinker_atropos.agent.chat_format import ChatScaffold
from tinker_atropos.environments.tool_calculator import ToolCalculatorEnv, tool_reward

CALL = '<tool_call>\n{{"name": "{name}", "arguments": {{"expression": "{expr}"}}}}\n</tool_call>'


async def _group(env):
    """The first training item's group (the item the tests script their replies for)."""
    try:
        await env.setup()
        item = env.train_items[0]
        group, _ = await env.collect_trajectories(item)
        return item, group
    finally:
        await close_env(env)


@pytest.mark.anyio
async def test_tokens_are_one_prefix_extended_sequence_with_only_sampled_tokens_trained(
    scripted, tiny_path, tiny_tokenizer
) -> None:
    url, sampler = scripted
    env = make_env(ToolCalculatorEnv, url, tiny_path, group_size=2)
    await env.setup()
    item = env.train_items[0]
    sampler.script = [CALL.format(name="calculator", expr=item.expression), f"The answer is {item.answer}."]
    item, group = await _group(env)

    assert group["scores"] == [1.0, 1.0] and all(o["correct"] for o in group["overrides"])
    assert group["overrides"][0] == {"correct": True, "turns": 2, "tool_calls": 1, "tool_errors": 0}
    tokens, masks, lps = group["tokens"][0], group["masks"][0], group["inference_logprobs"][0]
    assert len(tokens) == len(masks) == len(lps)
    # every turn's prompt is a prefix of the final sequence: the sequence only ever grew
    turn_prompts = sorted({tuple(p) for p in sampler.prompts if len(p) > 100}, key=len)  # not health checks
    assert len(turn_prompts) == 2 and len(turn_prompts[0]) < len(turn_prompts[1])
    for p in turn_prompts:
        assert tokens[: len(p)] == list(p)
    # trained positions are exactly the sampled replies, with the sampler's logprobs
    replies = [sampler.reply_tokens(s) for s in sampler.script]
    trained = [i for i, m in enumerate(masks) if m != -100]
    assert [tokens[i] for i in trained] == replies[0] + replies[1]
    assert all(masks[i] == tokens[i] for i in trained)
    expected = [-0.1 - 0.01 * k for r in replies for k in range(len(r))]
    # float64 values through JSON; 1e-6 covers a float32 hop (|lp| < 1: u * |lp| < 6e-8)
    assert [lps[i] for i in trained] == pytest.approx(expected, abs=1e-6)
    assert all(lps[i] == 1.0 for i in range(len(tokens)) if masks[i] == -100)
    assert trained[0] == len(turn_prompts[0]) and trained[-1] == len(tokens) - 1
    # the masked scaffolding is the chat template's own text for this conversation
    history = [
        {"role": "system", "content": env.config.system_prompt},
        {"role": "user", "content": env.format_prompt(item)},
        {"role": "assistant", "content": sampler.script[0]},
        *[m for m in group["messages"][0] if m["role"] == "tool"],
        {"role": "assistant", "content": sampler.script[1]},
    ]
    rendered = ChatScaffold(tiny_tokenizer, env._resolve_tools_for_group()[0]).render(history, False)
    assert tiny_tokenizer.decode(tokens) == rendered.rstrip("\n")
    call = group["messages"][0][2]["tool_calls"][0]
    assert call["function"]["name"] == "calculator"
    assert group["messages"][0][3] == {
        "role": "tool",
        "tool_call_id": call["id"],
        "name": "calculator",
        "content": str(item.answer),
    }


@pytest.mark.anyio
async def test_malformed_and_unknown_calls_become_counted_tool_errors_and_the_rollout_goes_on(
    scripted, tiny_path
) -> None:
    url, sampler = scripted
    sampler.script = [
        '<tool_call>{"name": "calculator", "arguments": {"expression": </tool_call>',
        CALL.format(name="web_search", expr="1"),
        "It is 3.",
    ]
    _, group = await _group(make_env(ToolCalculatorEnv, url, tiny_path, group_size=2))
    messages = group["messages"][0]
    tool_msgs = [m for m in messages if m["role"] == "tool"]
    assert len(tool_msgs) == 2
    assert json.loads(tool_msgs[0]["content"])["error"].startswith("malformed tool call: tool call #1: invalid JSON")
    assert json.loads(tool_msgs[1]["content"]) == {"error": "Unknown tool: 'web_search'. Available tools: calculator"}
    assert group["overrides"][0] == {"correct": False, "turns": 3, "tool_calls": 2, "tool_errors": 2}
    assert messages[-1] == {"role": "assistant", "content": "It is 3."}
    assert 0.0 < group["scores"][0] < 0.5  # tag credit + closeness, no answer credit


@pytest.mark.anyio
async def test_max_agent_turns_ends_the_rollout_and_it_is_still_scored(scripted, tiny_path) -> None:
    url, sampler = scripted
    env = make_env(ToolCalculatorEnv, url, tiny_path, group_size=2, max_agent_turns=2)
    await env.setup()
    sampler.script = [CALL.format(name="calculator", expr=env.train_items[0].expression)]
    item, group = await _group(env)
    assert group["overrides"][0] == {"correct": False, "turns": 2, "tool_calls": 2, "tool_errors": 0}
    assert group["scores"][0] == pytest.approx(0.5)  # tag, parse, name, right expression
    # the last turn's tool results are not templated into tokens: nothing samples after them
    assert group["masks"][0][-1] != -100


@pytest.mark.anyio
async def test_the_context_limit_is_respected(scripted, tiny_path) -> None:
    url, sampler = scripted
    sampler.script = [CALL.format(name="calculator", expr="1 + 1")]
    env = make_env(
        ToolCalculatorEnv, url, tiny_path, group_size=2, max_token_length=1400, max_agent_turns=30, max_turn_tokens=None
    )
    _, group = await _group(env)
    turns = group["overrides"][0]["turns"]
    assert 1 <= turns < 30
    assert all(len(t) < 1400 for t in group["tokens"])


@pytest.mark.anyio
async def test_phase1_chat_endpoint_returns_native_tool_calls(scripted, tiny_path) -> None:
    url, sampler = scripted
    env = make_env(ToolCalculatorEnv, url, tiny_path, group_size=2, server_type="openai")
    await env.setup()
    item = env.train_items[0]
    sampler.script = [CALL.format(name="calculator", expr=item.expression), f"{item.answer}"]
    _, group = await _group(env)
    messages = group["messages"][0]
    call = messages[2]["tool_calls"][0]
    assert call["type"] == "function" and json.loads(call["function"]["arguments"]) == {"expression": item.expression}
    assert messages[3]["content"] == str(item.answer) and messages[3]["tool_call_id"] == call["id"]
    assert group["scores"] == [1.0, 1.0] and "inference_logprobs" not in group
    assert group["overrides"][0]["turns"] == 2
    tokens, masks = group["tokens"][0], group["masks"][0]
    assert len(tokens) == len(masks) and any(m != -100 for m in masks)


def test_tool_reward_ladder() -> None:
    from tinker_atropos.agent.loop import AgentResult, ToolError
    from tinker_atropos.environments.tool_calculator import Problem

    item = Problem(37, "+", 48)
    call = {"id": "c", "type": "function", "function": {"name": "calculator", "arguments": '{"expression": "37+48"}'}}
    tool = {"role": "tool", "tool_call_id": "c", "content": "85"}

    def reward(*messages, errors=()):
        return tool_reward(
            item, AgentResult(messages=[{"role": "user", "content": "q"}, *messages], tool_errors=list(errors))
        )

    assert reward({"role": "assistant", "content": "no idea"}) == 0.0
    assert 0.0 < reward({"role": "assistant", "content": "80"}) < reward({"role": "assistant", "content": "84"}) <= 0.1
    assert reward({"role": "assistant", "content": ""}, errors=[ToolError(1, "", "", "bad", "")]) == 0.1
    assert reward({"role": "assistant", "content": "85"}) == 0.4
    full = reward(
        {"role": "assistant", "content": "", "tool_calls": [call]}, tool, {"role": "assistant", "content": "It is 85."}
    )
    assert full == 1.0


@pytest.mark.anyio
async def test_the_agent_base_draws_its_items_and_names_an_empty_list(scripted, tiny_path) -> None:
    """get_next_item is the product's draw over `train_items`: seeded, every item once a pass; an
    environment that filled none is told what to do, not given an empty draw."""
    url, _ = scripted
    env = make_env(ToolCalculatorEnv, url, tiny_path, group_size=2, num_train_items=5)
    await env.setup()
    drawn = [await env.get_next_item() for _ in range(5)]
    assert sorted(map(id, drawn)) == sorted(map(id, env.train_items))  # a shuffled pass, each once
    empty = make_env(ToolCalculatorEnv, url, tiny_path, group_size=2)
    with pytest.raises(ValueError, match="fill `train_items` in setup"):
        await empty.get_next_item()
    await close_env(env)
