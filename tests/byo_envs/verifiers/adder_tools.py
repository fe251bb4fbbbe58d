"""Adder: sum two numbers with an `add` tool (a classic verifiers ToolEnv, run in its own venv by the tests).

A reply without a tool call gets a hint as a user turn, until `max_turns`, so every episode is
multi-turn whatever the model writes: its later turns carry tool or user messages that are not the
model's, and those must be masked out of training.
"""

import verifiers as vf
from datasets import Dataset

HINT = 'Call the tool first, like <tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>.'


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def answered(completion, answer, **kwargs) -> float:
    """1 when the last reply holds the sum."""
    return float(bool(completion) and answer in str(completion[-1].content or ""))


class HintingToolEnv(vf.ToolEnv):
    """ToolEnv, except that a turn without a tool call is answered with a hint instead of ending."""

    async def no_tools_called(self, state: vf.State) -> bool:  # no longer a stop: max_turns ends it
        return False

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        if getattr(messages[-1], "tool_calls", None):
            return await super().env_response(messages, state, **kwargs)
        return [vf.UserMessage(role="user", content=HINT)]


def load_environment(num_examples: int = 16, max_turns: int = 2, seed: int = 0) -> vf.Environment:
    """Add two numbers with the `add` tool, scored by whether the last reply holds the sum.

    Args:
        num_examples: How many questions.
        max_turns: Model turns per episode.
        seed: Offset of the generated numbers.
    """
    rows = [
        {"question": f"What is {seed + 11 + i} + {seed + 23 + 3 * i}?", "answer": str(2 * seed + 34 + 4 * i)}
        for i in range(num_examples)
    ]
    return HintingToolEnv(
        dataset=Dataset.from_list(rows),
        tools=[add],
        max_turns=max_turns,
        system_prompt="Use the add tool to add numbers, then reply with the sum alone.",
        rubric=vf.Rubric(funcs=[answered]),
    )
