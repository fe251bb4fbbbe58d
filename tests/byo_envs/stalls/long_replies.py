"""An environment that asks each reply for `max_token_length` tokens, as hermes-agent's agent loop
does per turn (its terminal_test_env sets 16000), with greedy decoding: the tiny model then never
stops by itself, so every reply runs to whatever caps it. `prompt_words` pads the prompt, so a
reply can run to the model's context instead. `score_delay_s` makes scoring take that long after the
replies came (a slow judge), so what rl_test_inference reports while it waits is seen on any machine."""

import asyncio

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer
from pydantic import Field

from tinker_atropos.environments.common import local_server_defaults


class LongRepliesConfig(BaseEnvConfig):
    prompt_words: int = Field(0, ge=0, description="Filler words before the question")
    score_delay_s: float = Field(0.0, ge=0.0, description="Seconds scoring takes once the replies came")


class LongRepliesEnv(BaseEnv):
    name = "long_replies"
    env_config_cls = LongRepliesConfig

    @classmethod
    def config_init(cls):
        servers = local_server_defaults()
        config = LongRepliesConfig(
            wandb_name=cls.name,
            tokenizer_name=servers[0].tokenizer_name,
            group_size=2,
            max_token_length=100_000,
            use_wandb=False,
        )
        return config, servers

    async def setup(self):
        self.iter = 0

    async def get_next_item(self):
        self.iter += 1
        return f"Tell story number {self.iter}."

    async def collect_trajectories(self, item):
        filler = "word " * self.config.prompt_words
        messages = [{"role": "user", "content": filler + item}]
        completion = await self.server.chat_completion(
            messages=messages, n=self.config.group_size, max_tokens=self.config.max_token_length, temperature=0.0
        )
        group = ScoredDataGroup(tokens=[], masks=[], scores=[])
        for i, choice in enumerate(completion.choices):
            out = tokenize_for_trainer(
                self.tokenizer, [*messages, {"role": "assistant", "content": choice.message.content}]
            )
            group["tokens"].append(out["tokens"])
            group["masks"].append(out["masks"])
            group["scores"].append(float(i))
        await asyncio.sleep(self.config.score_delay_s)
        return group, []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    LongRepliesEnv.cli()
