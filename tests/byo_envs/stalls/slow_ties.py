"""A slow environment whose first groups tie: each group takes `group_delay_s` (a slow tool or judge),
and the first `tied_groups` score all alike, so it discards them as Atropos' own environments do;
after them its replies score apart (by their place in the group) and it trains."""

import asyncio

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer
from pydantic import Field

from tinker_atropos.environments.common import local_server_defaults


class SlowTiesConfig(BaseEnvConfig):
    group_delay_s: float = Field(1.5, ge=0.0, description="Seconds each group takes beside its replies")
    tied_groups: int = Field(8, ge=0, description="The first groups, all of whose replies score the same")


class SlowTiesEnv(BaseEnv):
    name = "slow_ties"
    env_config_cls = SlowTiesConfig

    @classmethod
    def config_init(cls):
        servers = local_server_defaults()
        config = SlowTiesConfig(
            wandb_name=cls.name, tokenizer_name=servers[0].tokenizer_name, group_size=4, use_wandb=False
        )
        return config, servers

    async def setup(self):
        self.started = 0
        self.percent_correct_buffer = []

    async def get_next_item(self):
        self.started += 1
        return self.started

    async def collect_trajectories(self, item):
        messages = [{"role": "user", "content": f"Count to {item}."}]
        completion = await self.server.chat_completion(
            messages=messages, n=self.config.group_size, max_tokens=16, temperature=1.0
        )
        await asyncio.sleep(self.config.group_delay_s)
        tied = item <= self.config.tied_groups
        group = ScoredDataGroup(tokens=[], masks=[], scores=[])
        for i, choice in enumerate(completion.choices):
            chat = [*messages, {"role": "assistant", "content": choice.message.content}]
            out = tokenize_for_trainer(self.tokenizer, chat)
            group["tokens"].append(out["tokens"])
            group["masks"].append(out["masks"])
            group["scores"].append(0.0 if tied else float(i))
            self.percent_correct_buffer.append(group["scores"][-1])
        return (None if tied else group), []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    SlowTiesEnv.cli()
