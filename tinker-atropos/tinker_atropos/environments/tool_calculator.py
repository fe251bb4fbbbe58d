"""tool_calculator: call a calculator tool, then report its result. Offline; sized for the local
models (SmolLM2-135M-Instruct, tiny-chat).

"What is 37 + 48? Use the calculator tool." The agent may call `calculator(expression)` and
must end with the number. A small model emits no `<tool_call>` from the prompt alone, so the
reward is a ladder with credit for every step toward the behaviour, and a graded closeness term
so a group's scores differ from the very first step:

    0.10  a `<tool_call>` tag anywhere
  + 0.10  it parses (JSON object with a name)
  + 0.10  the name is `calculator`
  + 0.20  its expression evaluates to the answer
  + 0.40  the final reply states the answer (else up to 0.10 for a number close to it)
  + 0.10  that final reply came after a tool result (the tool was actually used)

Correct (percent_correct, eval accuracy) = the final reply states the exact answer.

SmolLM2-135M never emits a tool call by itself (0 of 16 samples), so no ladder step above the
closeness term is ever sampled. `demonstrations_per_group` (1 by default here) plays one rollout
per group from `demonstration()`: the calculator call, the real tool result, the answer. It is
scored and trained like the sampled rollouts (its tokens get the group's advantage), which shows
the policy the tool format; set it to 0 for pure RL on a model that already calls tools.
"""

from __future__ import annotations

import ast
import json
import operator
import random
import re
from dataclasses import dataclass

from atroposlib.envs.base import APIServerConfig
from pydantic import Field

from tinker_atropos.agent.base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
from tinker_atropos.agent.loop import AgentResult, tool_error
from tinker_atropos.agent.tool_calls import ToolCall, format_tool_call, new_call_id
from tinker_atropos.agent.tools import ToolContext, ToolResult
from tinker_atropos.environments.common import local_server_defaults
from tinker_atropos.environments.splits import ValidationSettings, carve_validation
from tinker_atropos.models.paths import SMOLLM2

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression (+, -, *, /, parentheses).",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "e.g. 37 + 48"}},
            "required": ["expression"],
        },
    },
}
_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def calculate(expression: str) -> float:
    """Arithmetic only: numbers, + - * /, parentheses (ValueError for anything else)."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")

    if len(expression) > 200:
        raise ValueError("expression too long")
    try:
        return ev(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ZeroDivisionError) as exc:
        raise ValueError(str(exc)) from exc


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:.6g}"


@dataclass(frozen=True)
class Problem:
    a: int
    op: str
    b: int

    @property
    def expression(self) -> str:
        return f"{self.a} {self.op} {self.b}"

    @property
    def answer(self) -> int:
        return int(calculate(self.expression))


class ToolCalculatorConfig(HermesAgentEnvConfig, ValidationSettings):
    num_train_items: int = Field(default=512, ge=1)
    eval_size: int = Field(
        default=16, ge=0, description="Held-out problems, scored (greedy) before the first step and at the end."
    )
    operators: str = Field(default="+-", min_length=1, description="Operators to draw from (+-*).")
    seed: int = Field(default=0)


class ToolCalculatorEnv(HermesAgentBaseEnv):
    name = "tool_calculator"
    env_config_cls = ToolCalculatorConfig

    @classmethod
    def config_init(cls) -> tuple[ToolCalculatorConfig, list[APIServerConfig]]:
        servers = local_server_defaults(model=SMOLLM2)
        config = ToolCalculatorConfig(
            wandb_name=cls.name,
            tokenizer_name=servers[0].tokenizer_name,
            group_size=8,
            batch_size=32,
            max_token_length=768,
            max_agent_turns=3,
            max_turn_tokens=48,
            agent_temperature=1.0,
            steps_per_eval=10,
            eval_at_end=True,
            use_wandb=False,
            system_prompt="You can call tools. Call the calculator, then answer with the number.",
            demonstrations_per_group=1,  # SmolLM2 never emits a tool call unprompted: show it one per group
        )
        return config, servers

    async def setup(self) -> None:
        cfg: ToolCalculatorConfig = self.config  # type: ignore[assignment]
        rng = random.Random(cfg.seed)

        def draw() -> Problem:
            return Problem(rng.randint(10, 99), rng.choice(cfg.operators), rng.randint(10, 99))

        train = [draw() for _ in range(cfg.num_train_items)]
        self.eval_items = [draw() for _ in range(cfg.eval_size)]
        size = cfg.validation_items(cfg.eval_size)
        self.train_items, self.validation_items = carve_validation(
            train, size, cfg.seed, lambda p: p.expression, self.eval_items
        )

    def format_prompt(self, item: Problem) -> str:
        return f"What is {item.expression}? Use the calculator tool."

    def demonstration(self, item: Problem) -> list[str]:
        """Call the calculator, then state its result: what the reward's ladder tops out at."""
        call = ToolCall(CALCULATOR["function"]["name"], {"expression": item.expression}, new_call_id())
        return [format_tool_call(call), str(item.answer)]

    def _resolve_tools_for_group(self) -> tuple[list[dict], set[str]]:
        return [CALCULATOR], {"calculator"}

    async def execute_tool(self, name: str, arguments: dict, ctx: ToolContext) -> ToolResult:
        try:
            return ToolResult(_fmt(calculate(str(arguments.get("expression", "")))))
        except ValueError as exc:
            return tool_error(f"calculator: {exc}")

    async def compute_reward(self, item: Problem, result: AgentResult, ctx: ToolContext) -> float:
        return tool_reward(item, result)

    def is_correct(self, item: Problem, result: AgentResult, reward: float) -> bool:
        return _final_number(result) == item.answer

    async def evaluate(self, *args, **kwargs) -> None:
        await self.evaluate_periodic()


def _final_number(result: AgentResult) -> float | None:
    """The last number of the last assistant reply, when that reply calls no tool."""
    last = next((m for m in reversed(result.messages) if m["role"] == "assistant"), None)
    if last is None or last.get("tool_calls"):
        return None
    numbers = _NUMBER.findall(last.get("content") or "")
    return float(numbers[-1]) if numbers else None


def tool_reward(item: Problem, result: AgentResult) -> float:
    """The ladder in the module docstring, in [0, 1]."""
    replies = [m for m in result.messages if m["role"] == "assistant"]
    raw = " ".join((m.get("content") or "") for m in replies)
    calls = [c["function"] for m in replies for c in m.get("tool_calls") or []]
    tagged = bool(calls) or "<tool_call>" in raw or bool(result.tool_errors)
    named = [c for c in calls if c["name"] == CALCULATOR["function"]["name"]]
    reward = 0.1 * tagged + 0.1 * bool(calls) + 0.1 * bool(named)
    if any(_evaluates_to(c["arguments"], item.answer) for c in named):
        reward += 0.2
    final = _final_number(result)
    if final == item.answer:
        reward += 0.4
        if any(m["role"] == "tool" for m in result.messages):
            reward += 0.1
    elif final is not None:
        reward += 0.1 * max(0.0, 1.0 - abs(final - item.answer) / max(abs(item.answer), 10))
    return round(reward, 4)


def _evaluates_to(arguments: str, answer: int) -> bool:
    try:
        return calculate(str(json.loads(arguments).get("expression", ""))) == answer
    except (ValueError, AttributeError):
        return False


if __name__ == "__main__":
    ToolCalculatorEnv.cli()
