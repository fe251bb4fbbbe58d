"""Plurals: write a word's plural (an Atropos environment whose answers come from `inflection`)."""

import random
from difflib import SequenceMatcher

import inflection
from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.server_manager import ServerBaseline
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer
from pydantic import Field

WORDS = ["cat", "box", "city", "leaf", "person", "mouse", "child", "bus"]


class PluralConfig(BaseEnvConfig):
    reply_tokens: int = Field(8, ge=1, le=64, description="Most tokens in a reply")


class PluralEnv(BaseEnv):
    env_config_cls = PluralConfig

    @classmethod
    def config_init(cls):
        config = PluralConfig(wandb_name="atropos_inflect", tokenizer_name="org/some-hub-tokenizer", use_wandb=False)
        return config, ServerBaseline()

    async def setup(self):
        self.rng = random.Random(0)

    async def get_next_item(self):
        return self.rng.choice(WORDS)

    async def collect_trajectories(self, item):
        messages = [{"role": "user", "content": f"What is the plural of {item}? One word."}]
        completion = await self.server.chat_completion(
            messages=messages, n=self.config.group_size, max_tokens=self.config.reply_tokens, temperature=1.0
        )
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        for choice in completion.choices:
            chat = [*messages, {"role": "assistant", "content": choice.message.content or ""}]
            out = tokenize_for_trainer(self.tokenizer, chat, include_messages=True)
            group["tokens"].append(out["tokens"])
            group["masks"].append(out["masks"])
            reply = chat[-1]["content"].strip().lower()
            # how close the reply is to the plural: graded, so a small model's group is not all zeros
            group["scores"].append(SequenceMatcher(None, reply, inflection.pluralize(item)).ratio())
            group["messages"].append(out["messages"])
        return group, []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    PluralEnv.cli()
