"""Supervised examples made the way a rollout of the environment is made: its own agent loop, chat
template, tool prompt, result budget and turn and context limits, with the assistant turns played
from a script instead of sampled. So an example's tokens are exactly those a rollout of the same
conversation has, and only the policy's own tokens (end of turn included) are trained.

Two ways in: an environment's `demonstration(item)`, played through its real tools and kept where
its own reward passes; and a conversation read from a file (`conversations.py`), whose tool results
are the recorded ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tinker_atropos.agent import task_sandboxes
from tinker_atropos.agent.base_env import HermesAgentBaseEnv
from tinker_atropos.agent.loop import PROMPT_MASK, AgentResult, HermesAgentLoop
from tinker_atropos.agent.tools import ToolResult
from tinker_atropos.sft.conversations import Conversation


@dataclass(frozen=True)
class Example:
    """One supervised sequence: `masks` holds the token where it is trained, PROMPT_MASK elsewhere."""

    source: str  # demonstrations | file | teacher | hermes_sessions
    origin: str  # where it came from, for a person: "line 3", "item 12"
    tokens: list[int]
    masks: list[int]
    tool_calls: int

    @property
    def trained_tokens(self) -> int:
        return sum(m != PROMPT_MASK for m in self.masks)

    @property
    def prompt(self) -> list[int]:
        """The tokens before the first trained one: a rollout's first request of this item (system
        prompt, tools, the task), what the stage times its server's decode step on."""
        trained = next((i for i, m in enumerate(self.masks) if m != PROMPT_MASK), len(self.tokens))
        return self.tokens[:trained]

    def as_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "origin": self.origin,
            "tokens": self.tokens,
            "masks": self.masks,
            "tool_calls": self.tool_calls,
        }


@dataclass(frozen=True)
class Refused:
    """A candidate that did not become an example, and why (said to the agent before it trains)."""

    source: str
    origin: str
    reason: str


def _example(env: HermesAgentBaseEnv, source: str, origin: str, result: AgentResult, turns: int) -> Example | Refused:
    trace, limit = result.trace, env.config.max_token_length
    if trace is None or not trace.tokens:
        return Refused(source, origin, "the conversation rendered to no tokens")
    if result.stop_reason == "context" or len(trace) >= limit:
        return Refused(source, origin, f"longer than the context: {len(trace)} tokens, max_token_length {limit}")
    if result.turns_used < turns:
        return Refused(
            source,
            origin,
            f"{turns} assistant turns, more than the environment's max_agent_turns ({result.turns_used})",
        )
    return Example(source, origin, list(trace.tokens), list(trace.masks), result.tool_calls)


async def from_conversation(
    env: HermesAgentBaseEnv, conversation: Conversation, source: str = "file", origin: str | None = None
) -> Example | Refused:
    """A recorded conversation rendered as the environment renders a rollout, its tool results the recorded ones."""
    origin = origin or f"line {conversation.line}"
    recorded: Iterator[str] = iter([r for turn in conversation.turns for r in turn.results])

    async def replay(name: str, arguments: dict[str, Any]) -> ToolResult:
        return ToolResult(next(recorded, ""))

    task_id = uuid.uuid4().hex
    turns = [t.text for t in conversation.turns]
    async with task_sandboxes.task_sandbox(task_id):  # a result over the budget is saved in it, as in a rollout
        settings = env.loop_settings(task_id, replay, temperature=0.0)
        result = await HermesAgentLoop(server=None, demonstration=turns, **settings).run(_prompt(env, conversation))
    return _example(env, source, origin, result, len(turns))


def _prompt(env: HermesAgentBaseEnv, conversation: Conversation) -> list[dict[str, Any]]:
    """The conversation's opening messages; where it brings no system message of its own (a Hermes
    trajectory's was its tool prompt, dropped), the environment's, as its rollouts have it."""
    prompt: list[dict[str, Any]] = list(conversation.prompt)
    if env.config.system_prompt and not any(m["role"] == "system" for m in prompt):
        prompt.insert(0, {"role": "system", "content": env.config.system_prompt})
    return prompt


async def from_demonstration(env: HermesAgentBaseEnv, item: Any, origin: str, min_score: float) -> Example | Refused:
    """The environment's expert turns for a training item, played through its real tools, kept when
    the environment's own reward reaches `min_score`."""
    turns = env.demonstration(item)
    if turns is None:
        return Refused("demonstrations", origin, f"{type(env).__name__} has no demonstration for this item")
    result, reward = await env.rollout(item, demonstration=turns, temperature=0.0)
    made = _example(env, "demonstrations", origin, result, len(turns))
    if isinstance(made, Example) and reward < min_score:
        return Refused("demonstrations", origin, f"its reward {reward:g} is under min_score {min_score:g}")
    return made
