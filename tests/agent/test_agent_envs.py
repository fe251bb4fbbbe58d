"""The bundled agentic environments and the Hermes port: rewards verified in the rollout's own
sandbox, the ported example's rollout, the trajectory text and the batch's agent metrics."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from agent_helpers import close_env, make_env

from tinker_atropos.agent.trajectory import format_trajectory
from tinker_atropos.environments.terminal_files import TerminalFilesEnv
from tinker_atropos.trainer.batches import groups_to_datums

ROOT = Path(__file__).resolve().parents[2]


def _call(name: str, **arguments) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


# tiny-chat spends a token per character: the five Hermes tool schemas alone take ~5000


async def _rollout_group(env, item):
    try:
        await env.setup()
        return (await env.collect_trajectories(item))[0]
    finally:
        await close_env(env)


@pytest.mark.anyio
async def test_terminal_env_reward_runs_the_check_in_the_rollout_sandbox(scripted, tiny_path, tmp_path) -> None:
    url, sampler = scripted
    env = make_env(TerminalFilesEnv, url, tiny_path, group_size=2, max_token_length=16384)
    await env.setup()
    count_task = env.train_items[1]  # count the lines of data.txt (a file placed before the agent starts)
    lines = count_task.files["data.txt"].count("\n")
    sampler.script = [_call("terminal", command="wc -l < data.txt > count.txt"), "Done."]
    group = await _rollout_group(env, count_task)
    assert group["scores"] == [1.0, 1.0]
    result = json.loads(group["messages"][0][3]["content"])
    assert result["exit_code"] == 0 and group["overrides"][0]["tool_errors"] == 0
    assert lines >= 3

    sampler.script = [_call("write_file", path="count.txt", content="999\n"), "Done."]
    group = await _rollout_group(
        make_env(TerminalFilesEnv, url, tiny_path, group_size=2, max_token_length=16384), count_task
    )
    assert group["scores"] == [0.0, 0.0]

    fix = env.train_items[2]
    fixed = fix.files["calc.py"].replace("a - b", "a + b")
    sampler.script = [_call("write_file", path="calc.py", content=fixed), "Fixed."]
    group = await _rollout_group(make_env(TerminalFilesEnv, url, tiny_path, group_size=2, max_token_length=16384), fix)
    assert group["scores"] == [1.0, 1.0]


def _load_port():
    path = ROOT / "examples" / "hermes_port" / "terminal_hello_env.py"
    spec = importlib.util.spec_from_file_location("terminal_hello_env", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.anyio
async def test_ported_hermes_env_runs_a_real_rollout(scripted, tiny_path) -> None:
    module = _load_port()
    url, sampler = scripted
    env = make_env(module.TerminalHelloEnv, url, tiny_path, group_size=2, max_token_length=16384)
    await env.setup()
    item = await env.get_next_item()
    sampler.script = [_call("terminal", command=f"echo '{item['expected']}' > {item['path']}"), "Created it."]
    group = await _rollout_group(env, item)
    assert group["scores"] == [1.0, 1.0]
    assert len(group["inference_logprobs"][0]) == len(group["tokens"][0])


def test_trajectory_text_shows_calls_results_and_cuts_long_parts() -> None:
    messages = [
        {"role": "user", "content": "Count"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "terminal", "arguments": '{"command": "wc -l"}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x" * 900},
        {"role": "assistant", "content": "3"},
    ]
    text = format_trajectory(messages)
    assert text.startswith('[USER]\nCount\n\n[TOOL CALL] terminal({"command": "wc -l"})\n\n[TOOL RESULT] xxx')
    assert "... [400 more chars]" in text and text.endswith("[ASSISTANT]\n3")


def test_batch_reports_agent_metrics_only_when_sequences_do() -> None:
    group = {
        "tokens": [[1, 2, 3], [1, 2, 4]],
        "masks": [[-100, 2, 3], [-100, 2, 4]],
        "scores": [1.0, 0.0],
        "overrides": [
            {"correct": True, "turns": 2, "tool_calls": 1, "tool_errors": 0},
            {"correct": False, "turns": 4, "tool_calls": 3, "tool_errors": 2},
        ],
    }
    conv = groups_to_datums([group])
    assert (conv.agent_turns_mean, conv.agent_tool_calls_mean, conv.agent_tool_errors) == (3.0, 2.0, 2)
    plain = groups_to_datums([{k: v for k, v in group.items() if k != "overrides"}])
    assert (plain.agent_turns_mean, plain.agent_tool_calls_mean, plain.agent_tool_errors) == (None, None, None)


@pytest.mark.anyio
async def test_calculator_group_from_smollm2_has_unequal_scores(smollm2_url) -> None:
    """The real model, untrained: no tool call yet, but the shaped reward already separates replies."""
    from tinker_atropos.environments.tool_calculator import ToolCalculatorEnv
    from tinker_atropos.models import model_dir

    env = make_env(
        ToolCalculatorEnv,
        smollm2_url,
        model_dir("smollm2-135m"),
        group_size=4,
        max_token_length=768,
        max_turn_tokens=32,
        demonstrations_per_group=0,  # the model's own replies only
    )
    await env.setup()
    # four untrained samples can all earn the same shaped score (seen once in a CI-like run: 0.0341
    # each): the reward separates replies where a group's replies differ, so up to three groups
    groups = []
    for item in env.train_items[:3]:
        groups.append(group := await _rollout_group(env, item))
        if len(set(group["scores"])) > 1:
            break
    assert len(set(group["scores"])) > 1, [g["scores"] for g in groups]
    assert all(0.0 <= s <= 1.0 for s in group["scores"])
    for tokens, masks, lps in zip(group["tokens"], group["masks"], group["inference_logprobs"]):
        sampled = [lp for lp, m in zip(lps, masks) if m != -100]
        assert len(tokens) < 768 and sampled and all(lp <= 0.0 for lp in sampled)


@pytest.mark.anyio
async def test_a_demonstration_rollout_is_trained_like_a_sampled_one(scripted, tiny_path) -> None:
    """demonstrations_per_group=1: one rollout of the group plays the environment's expert turns
    through the real tools and reward; its turns are trained, the tool result and scaffolding not."""
    from tinker_atropos.environments.tool_calculator import ToolCalculatorEnv

    url, sampler = scripted
    sampler.script = ["I am not sure."]
    env = make_env(ToolCalculatorEnv, url, tiny_path, group_size=2, demonstrations_per_group=1)
    await env.setup()
    item = env.train_items[0]
    group = await _rollout_group(env, item)
    demo, sampled = group["scores"]
    assert demo == 1.0 and sampled < 0.5
    assert group["overrides"][0] == {"correct": True, "turns": 2, "tool_calls": 1, "tool_errors": 0}
    # the sampled rollout keeps its sampler logprobs; the trainer scores only the demonstration
    assert group["inference_logprobs"][0] == [] and len(group["inference_logprobs"][1]) == len(group["tokens"][1])
    tokens, masks = group["tokens"][0], group["masks"][0]
    trained = env.tokenizer.decode([t for t, m in zip(tokens, masks) if m != -100])
    context = env.tokenizer.decode([t for t, m in zip(tokens, masks) if m == -100])
    assert '"name": "calculator"' in trained and trained.rstrip().endswith(str(item.answer) + "<|im_end|>")
    assert "<tool_response>" in context and str(item.answer) in context and "What is" in context
    assert group["messages"][0][-1] == {"role": "assistant", "content": str(item.answer)}


@pytest.mark.anyio
async def test_agent_eval_reports_the_share_of_rollouts_with_a_well_formed_tool_call(scripted, tiny_path) -> None:
    from tinker_atropos.environments.tool_calculator import ToolCalculatorEnv

    url, sampler = scripted
    env = make_env(ToolCalculatorEnv, url, tiny_path, eval_size=2)
    try:
        await env.setup()
        a, b = env.eval_items
        sampler.script = [_call("calculator", expression=a.expression), str(a.answer)]
        called = await env.evaluate_agent([a])
        sampler.script = ['<tool_call>{"name": "calculator", "arguments": </tool_call>', str(b.answer)]
        malformed = await env.evaluate_agent([b])
        sampler.script = [str(a.answer)]
        answered = await env.evaluate_agent([a, b])
    finally:
        await close_env(env)
    assert called["eval_tool_call_share"] == 1.0 and called["eval_accuracy"] == 1.0
    assert malformed["eval_tool_call_share"] == 0.0 and malformed["eval_agent_turns_mean"] == 2
    assert answered["eval_tool_call_share"] == 0.0 and answered["eval_accuracy"] == 0.5
