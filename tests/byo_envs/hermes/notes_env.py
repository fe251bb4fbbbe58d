"""A Hermes agent environment as its author wrote it for hermes-agent, imports included.

tests/agent/test_hermes_port.py ports it by rewriting its import lines only (the table in
docs/agentic-environments.md) and runs it. It uses what Hermes environments use: the base env's
rollouts, `compute_reward` with `ToolContext` (terminal, read_file, download_file), and an
`evaluate` that drives `HermesAgentLoop` itself with every Hermes keyword, a `ToolContext(task_id)`
of its own and `ctx.cleanup()`, plus `budget_config`, `tool_result_overrides` and `tool_pool_size`.
"""

import tempfile
import uuid
from pathlib import Path
from typing import Any

from atroposlib.envs.server_handling.server_manager import APIServerConfig
from environments.agent_loop import AgentResult, HermesAgentLoop
from environments.hermes_base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
from environments.tool_context import ToolContext
from tools.budget_config import BudgetConfig

TASKS: list[dict[str, Any]] = [
    {"prompt": "Write the word ready into ~/notes/status.txt", "path": "~/notes/status.txt", "expected": "ready"},
    {"prompt": "Save the number 7 in the file seven.txt", "path": "seven.txt", "expected": "7"},
]


class HermesNotesEnv(HermesAgentBaseEnv):
    name = "hermes_notes"
    env_config_cls = HermesAgentEnvConfig

    @classmethod
    def config_init(cls):
        env_config = HermesAgentEnvConfig(
            enabled_toolsets=["terminal", "file"],
            max_agent_turns=4,
            agent_temperature=1.0,
            system_prompt="You keep notes in files. Use the tools, then say done.",
            terminal_backend="local",
            terminal_timeout=30,
            tool_pool_size=8,
            tool_result_overrides={"terminal": 400},
            preview_size_chars=120,
            group_size=2,
            batch_size=4,
            total_steps=2,
            steps_per_eval=100,
            max_token_length=4096,
            tokenizer_name="NousResearch/Hermes-3-Llama-3.1-8B",
            wandb_name="hermes_notes",
            use_wandb=False,
        )
        server_configs = [
            APIServerConfig(
                base_url="http://localhost:8000/v1",
                model_name="NousResearch/Hermes-3-Llama-3.1-8B",
                server_type="vllm",
                api_key="x",
            )
        ]
        return env_config, server_configs

    async def setup(self):
        self.iter = 0
        self.eval_results: list[float] = []

    async def get_next_item(self):
        item = TASKS[self.iter % len(TASKS)]
        self.iter += 1
        return item

    def format_prompt(self, item) -> str:
        return item["prompt"]

    async def compute_reward(self, item, result: AgentResult, ctx: ToolContext) -> float:
        shell = ctx.terminal(f"cat {item['path']}")
        if shell.get("exit_code") != 0 or shell.get("output", "").strip() != item["expected"]:
            return 0.0
        tool = ctx.read_file(item["path"])  # the file tool sees the file the shell sees
        if tool.get("content", "").split("\n")[0] != f"1|{item['expected']}":
            return 0.5
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "copy.txt"
            got = ctx.download_file(item["path"], str(copy))
            return 1.0 if got.get("success") and copy.read_text().strip() == item["expected"] else 0.75

    async def evaluate(self, *args, **kwargs):
        tools, valid_names = self._resolve_tools_for_group()
        budget: BudgetConfig = self.config.build_budget_config()
        for item in TASKS:
            task_id = str(uuid.uuid4())
            messages = [
                {"role": "system", "content": self.config.system_prompt},
                {"role": "user", "content": self.format_prompt(item)},
            ]
            if self._use_managed_server():
                async with self.server.managed_server(
                    tokenizer=self.tokenizer, preserve_think_blocks=bool(self.config.thinking_mode)
                ) as managed:
                    agent = HermesAgentLoop(
                        server=managed,
                        tool_schemas=tools,
                        valid_tool_names=valid_names,
                        max_turns=self.config.max_agent_turns,
                        task_id=task_id,
                        temperature=0.0,
                        max_tokens=self.config.max_token_length,
                        extra_body=self.config.extra_body,
                        budget_config=budget,
                    )
                    result = await agent.run(messages)
            else:
                agent = HermesAgentLoop(
                    server=self.server,
                    tool_schemas=tools,
                    valid_tool_names=valid_names,
                    max_turns=self.config.max_agent_turns,
                    task_id=task_id,
                    temperature=0.0,
                    max_tokens=self.config.max_token_length,
                    extra_body=self.config.extra_body,
                    budget_config=budget,
                )
                result = await agent.run(messages)
            ctx = ToolContext(task_id)
            try:
                reward = await self.compute_reward(item, result, ctx)
            finally:
                ctx.cleanup()
            self.eval_results.append(reward)


if __name__ == "__main__":
    HermesNotesEnv.cli()
