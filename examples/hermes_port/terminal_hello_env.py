"""A Hermes-style environment, ported: only the three imports marked PORT changed.

In hermes-agent it read:

    from environments.hermes_base_env import HermesAgentBaseEnv, HermesAgentEnvConfig
    from environments.agent_loop import AgentResult
    from environments.tool_context import ToolContext

Run it against the local inference server (docs/agentic-environments.md):

    python examples/hermes_port/terminal_hello_env.py process --config run.yaml \
        --env.data_path_to_save_groups /tmp/hello.jsonl
"""

from typing import Any

from atroposlib.envs.server_handling.server_manager import APIServerConfig

from tinker_atropos.agent.base_env import HermesAgentBaseEnv, HermesAgentEnvConfig  # PORT
from tinker_atropos.agent.loop import AgentResult  # PORT
from tinker_atropos.agent.tools import ToolContext  # PORT

TASKS: list[dict[str, Any]] = [
    {
        "prompt": "Create a file named hello.txt containing the text: hello world",
        "path": "hello.txt",
        "expected": "hello world",
    },
    {
        "prompt": "Write the word 'atropos' into out/word.txt (create the folder).",
        "path": "out/word.txt",
        "expected": "atropos",
    },
    {"prompt": "Put the number 42 alone in answer.txt.", "path": "answer.txt", "expected": "42"},
]


class TerminalHelloEnv(HermesAgentBaseEnv):
    name = "terminal_hello"
    env_config_cls = HermesAgentEnvConfig

    @classmethod
    def config_init(cls) -> tuple[HermesAgentEnvConfig, list[APIServerConfig]]:
        env_config = HermesAgentEnvConfig(
            enabled_toolsets=["terminal", "file"],
            max_agent_turns=8,
            max_token_length=4096,
            agent_temperature=1.0,
            system_prompt="You are a helpful agent with shell access. Do the task, then say done.",
            group_size=4,
            batch_size=16,
            total_steps=10,
            steps_per_eval=100,
            tokenizer_name="Qwen/Qwen3-8B",
            wandb_name="terminal_hello",
            use_wandb=False,
        )
        server_configs = [
            APIServerConfig(
                base_url="http://localhost:8001/v1",
                model_name="Qwen/Qwen3-8B",
                server_type="sglang",
                api_key="local",
                num_max_requests_at_once=16,
                timeout=300,
            )
        ]
        return env_config, server_configs

    async def setup(self):
        self.iter = 0

    async def get_next_item(self) -> dict[str, Any]:
        item = TASKS[self.iter % len(TASKS)]
        self.iter += 1
        return item

    def format_prompt(self, item: dict[str, Any]) -> str:
        return item["prompt"]

    async def compute_reward(self, item: dict[str, Any], result: AgentResult, ctx: ToolContext) -> float:
        out = ctx.terminal(f"cat {item['path']}")
        if out.get("exit_code") != 0:
            return 0.0
        return 1.0 if out.get("output", "").strip() == item["expected"] else 0.1

    async def evaluate(self, *args, **kwargs):
        await self.evaluate_agent(TASKS)


if __name__ == "__main__":
    TerminalHelloEnv.cli()
