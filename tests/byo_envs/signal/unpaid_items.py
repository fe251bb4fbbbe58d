"""A user's own Atropos environment, its own item order, whose reward never pays: every group ties
at zero. The product changes nothing in its draw and counts its items by prompt (items.json)."""

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

from tinker_atropos.environments.common import local_server_defaults

WORDS = ["apple", "river", "stone"]


class UnpaidItemsEnv(BaseEnv):
    name = "unpaid_items"

    @classmethod
    def config_init(cls):
        servers = local_server_defaults()
        config = BaseEnvConfig(
            wandb_name=cls.name, tokenizer_name=servers[0].tokenizer_name, group_size=4, batch_size=8, use_wandb=False
        )
        return config, servers

    async def setup(self):
        self.iter = 0

    async def get_next_item(self):
        word = WORDS[self.iter % len(WORDS)]
        self.iter += 1
        return word

    async def collect_trajectories(self, item):
        messages = [{"role": "user", "content": f"Spell {item} backwards."}]
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        completions = await self.server.completion(prompt=prompt, n=self.config.group_size, max_tokens=4)
        group = ScoredDataGroup(tokens=[], masks=[], scores=[])
        for choice in completions.choices:
            out = tokenize_for_trainer(self.tokenizer, [*messages, {"role": "assistant", "content": choice.text}])
            group["tokens"].append(out["tokens"])
            group["masks"].append(out["masks"])
            group["scores"].append(0.0)
        return group, []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    UnpaidItemsEnv.cli()
