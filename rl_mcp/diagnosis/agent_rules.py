"""Rules about agent (tool-calling) runs: a policy that never calls a tool.

Seen with a published verifiers ToolEnv on SmolLM2: 0 tool calls in 2 steps, and the only finding
was `no_reward_signal`, whose next step called the reward broken. A reward over tool use cannot
separate replies that all skip the tools: the finding names that, and the ways out (a format may
have its own: rl_mcp/formats/).
"""

from __future__ import annotations

from rl_mcp.diagnosis.facts import RunFacts, evidence_of, span_of
from rl_mcp.diagnosis.findings import Finding, NextStep
from rl_mcp.diagnosis.next_steps import edit
from rl_mcp.diagnosis.sft_rules import sft_taught_no_tool_calls
from rl_mcp.diagnosis.tie_rules import ties_evidence
from rl_mcp.formats import of_run
from rl_mcp.runs.metrics import series

WAYS_OUT = (
    "the model writes no tool call at all, so the tools and the reward over them are never reached (the "
    "reward is not broken). Ways out: a model that writes tool calls (a larger or tool-tuned one), "
    "partial credit for a well-formed call (`partial_credit`, where the environment has it), a system "
    "prompt that shows one call, or a supervised stage that demonstrates the calls"
)


SFT_START = {"sources": ["demonstrations"], "items": 64, "epochs": 3}
SFT_HOW = (
    "sources 'demonstrations' where the environment has demonstration(item), else 'file' with a JSONL of "
    "conversations that call its tools (file: <path>); rl_preview_sft shows the examples first; then start a new run"
)


def no_tool_calls(facts: RunFacts) -> Finding | None:
    """Every step of an agent run so far has zero tool calls per rollout; or, before its first step,
    its base model's evaluation made none and the environment drops every group as all-equal (seen
    with a ported Hermes terminal environment on SmolLM2: no step in 17 minutes, 0 calls in 120
    rollouts, while `no_reward_signal` called the reward broken)."""
    if sft_taught_no_tool_calls(facts) is not None:
        return None  # the supervised stage's finding says it, with the stage's own next step
    calls = series(facts.metrics, "agent_tool_calls_mean")
    if calls:
        if any(v > 0 for _, v in calls):
            return None
        title = "The model made no tool call in any rollout"
        evidence = evidence_of("agent_tool_calls_mean", calls, f"0 tool calls per rollout over {span_of(calls)}")
    else:
        shares = series(facts.evals, "eval_tool_call_share")
        if not (shares and facts.active and facts.env_drops_equal_groups) or any(v > 0 for _, v in shares):
            return None
        title = "No step yet: the model makes no tool call, so every group scores the same and is dropped"
        evidence = evidence_of(
            "eval_tool_call_share",
            shares,
            "no tool call in the base model's evaluation; since then atroposlib drops every group as all-equal",
        )
    fmt = of_run(facts.env)  # a format may have a way out of its own (OpenEnv: the action in words)
    own = fmt.next_step("no_tool_calls", facts, WAYS_OUT) if fmt is not None else None
    demonstrations = fmt is None or fmt.demonstrations
    if own is not None:
        step = own
    elif "sft" in facts.env and not facts.env.get("sft"):
        step = edit("sft", SFT_START, f"{WAYS_OUT}: a supervised stage before RL teaches it ({SFT_HOW})")
    elif demonstrations and "demonstrations_per_group" in facts.env and not facts.env.get("demonstrations_per_group"):
        step = edit("demonstrations_per_group", 1, f"{WAYS_OUT}: one demonstrated rollout per group shows the format")
    elif "system_prompt" in facts.env:
        step = edit("system_prompt", "<a prompt with one example tool call>", WAYS_OUT)
    else:
        step = NextStep("rl_test_inference", {"num_steps": 1}, f"read the sample trajectories: {WAYS_OUT}")
    return Finding("no_tool_calls", "error", title, step, [evidence, *ties_evidence(facts)])
