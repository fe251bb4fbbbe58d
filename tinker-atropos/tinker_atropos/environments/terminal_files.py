"""terminal_files: small shell tasks in a sandbox, verified in that same sandbox. For real models
(Tinker Qwen3-8B, OpenRouter); a 135M local model will not solve them.

Each task is an instruction ("Create notes/todo.txt containing exactly ...", "make test_calc.py
pass") plus files placed in the sandbox before the agent starts and a check command that
`compute_reward` runs through the ToolContext once the agent is done: exit code 0 scores 1.0.
The agent gets Hermes' terminal and file tools.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from atroposlib.envs.base import APIServerConfig
from pydantic import Field

from tinker_atropos.agent.base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
from tinker_atropos.agent.loop import AgentResult
from tinker_atropos.agent.tools import ToolContext
from tinker_atropos.environments.common import local_server_defaults

_CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
_TEST = (
    "from calc import add, mul\n\n\ndef test():\n    assert add(2, 3) == 5\n    assert mul(4, 5) == 20\n\n\n"
    "if __name__ == '__main__':\n    test()\n    print('ok')\n"
)


@dataclass(frozen=True)
class ShellTask:
    instruction: str
    check: str  # shell command; exit code 0 = solved
    files: dict[str, str] = field(default_factory=dict)


def make_tasks(n: int, seed: int) -> list[ShellTask]:
    """Generated tasks, three kinds, varied by seed."""
    rng = random.Random(seed)
    words = ["alpha", "bravo", "delta", "echo", "kilo", "lima", "oscar", "tango"]
    tasks = []
    for i in range(n):
        kind = i % 3
        word = rng.choice(words) + str(rng.randint(10, 99))
        if kind == 0:
            tasks.append(
                ShellTask(
                    f"Create the file notes/{word}.txt containing exactly the line: {word}",
                    f'test "$(cat notes/{word}.txt)" = {word}',
                )
            )
        elif kind == 1:
            count = rng.randint(3, 9)
            lines = "\n".join(f"{w}{rng.randint(0, 9)}" for w in rng.choices(words, k=count))
            tasks.append(
                ShellTask(
                    "Count the lines of data.txt and write the number alone to count.txt.",
                    f"test \"$(tr -d ' \\n' < count.txt)\" = {count}",
                    {"data.txt": lines + "\n"},
                )
            )
        else:
            tasks.append(
                ShellTask(
                    "Fix calc.py so that `python test_calc.py` passes; do not edit the test.",
                    "python test_calc.py && grep -q 'assert add(2, 3) == 5' test_calc.py",
                    {"calc.py": _CALC, "test_calc.py": _TEST},
                )
            )
    return tasks


class TerminalFilesConfig(HermesAgentEnvConfig):
    num_train_items: int = Field(default=300, ge=1)
    eval_size: int = Field(default=12, ge=0)
    seed: int = Field(default=0)


class TerminalFilesEnv(HermesAgentBaseEnv):
    name = "terminal_files"
    env_config_cls = TerminalFilesConfig

    @classmethod
    def config_init(cls) -> tuple[TerminalFilesConfig, list[APIServerConfig]]:
        servers = local_server_defaults()
        config = TerminalFilesConfig(
            wandb_name=cls.name,
            tokenizer_name=servers[0].tokenizer_name,
            group_size=4,
            batch_size=16,
            max_token_length=8192,
            max_agent_turns=10,
            enabled_toolsets=["terminal", "file"],
            terminal_timeout=60,
            agent_temperature=1.0,
            steps_per_eval=20,
            use_wandb=False,
            system_prompt="You are an agent working in a Linux shell. Use the tools to do the task "
            "in the current directory, check your work, then reply with a short summary.",
        )
        return config, servers

    async def setup(self) -> None:
        cfg: TerminalFilesConfig = self.config  # type: ignore[assignment]
        self.train_items = make_tasks(cfg.num_train_items, cfg.seed)
        self.eval_items = make_tasks(cfg.eval_size, cfg.seed + 1)

    def format_prompt(self, item: ShellTask) -> str:
        return item.instruction

    async def prepare_sandbox(self, item: ShellTask, ctx: ToolContext) -> None:
        for path, content in item.files.items():
            await (await ctx.sandbox()).write_bytes(path, content.encode())

    async def compute_reward(self, item: ShellTask, result: AgentResult, ctx: ToolContext) -> float:
        out = ctx.terminal(item.check, timeout=60)
        return 1.0 if out.get("exit_code") == 0 else 0.0

    async def evaluate(self, *args, **kwargs) -> None:
        await self.evaluate_agent(self.eval_items)


if __name__ == "__main__":
    TerminalFilesEnv.cli()
