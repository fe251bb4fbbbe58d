"""A single-turn Atropos environment in the shape upstream ones take: `self.server.chat_completion`
with n = group_size, `tokenize_for_trainer` per reply, and a `config_init` that returns a
`ServerBaseline` (as Atropos' gsm8k does), not a list of servers."""

import random

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.server_manager import ServerBaseline
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer
from pydantic import Field

WORDS = ["apple", "river", "stone", "cloud", "maple", "ember", "tiger", "lemon"]


class EchoConfig(BaseEnvConfig):
    target_letter: str = Field("e", min_length=1, max_length=1, description="The letter replies are rewarded for")
    reply_tokens: int = Field(12, ge=1, le=64, description="Most tokens in a reply")


def letter_share(reply: str, letter: str) -> float:
    return reply.count(letter) / max(len(reply), 1)


class EchoWordEnv(BaseEnv):
    name = "echo_word"
    env_config_cls = EchoConfig

    @classmethod
    def config_init(cls):
        config = EchoConfig(wandb_name=cls.name, tokenizer_name="org/some-hub-tokenizer", group_size=4, use_wandb=False)
        return config, ServerBaseline()

    async def setup(self):
        self.rng = random.Random(0)

    async def get_next_item(self):
        return self.rng.choice(WORDS)

    async def collect_trajectories(self, item):
        messages = [{"role": "user", "content": f"Say the word {item}."}]
        completion = await self.server.chat_completion(
            messages=messages, n=self.config.group_size, max_tokens=self.config.reply_tokens, temperature=1.0
        )
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        for choice in completion.choices:
            chat = [*messages, {"role": "assistant", "content": choice.message.content or ""}]
            out = tokenize_for_trainer(self.tokenizer, chat, include_messages=True)
            group["tokens"].append(out["tokens"])
            group["masks"].append(out["masks"])
            group["scores"].append(letter_share(chat[-1]["content"], self.config.target_letter))
            group["messages"].append(out["messages"])
        return group, []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    EchoWordEnv.cli()
