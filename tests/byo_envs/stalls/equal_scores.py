"""An environment in the shape of Atropos' own text_reversal: `self.server.completion` with
n = group_size, and a `score()` that returns None (the group is discarded) when every reply scores
the same. The tiny model never reverses a word, so every reply scores 0 and every group is discarded."""

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

from tinker_atropos.environments.common import local_server_defaults

WORDS = ["apple", "river", "stone", "cloud", "maple", "ember", "tiger", "lemon"]


class EqualScoresEnv(BaseEnv):
    name = "equal_scores"

    @classmethod
    def config_init(cls):
        servers = local_server_defaults()
        config = BaseEnvConfig(
            wandb_name=cls.name, tokenizer_name=servers[0].tokenizer_name, group_size=4, use_wandb=False
        )
        return config, servers

    async def setup(self):
        self.iter = 0
        self.percent_correct_buffer = []

    async def get_next_item(self):
        word = WORDS[self.iter % len(WORDS)]
        self.iter += 1
        return word

    async def collect_trajectories(self, item):
        messages = [{"role": "user", "content": f"Reverse this word: {item}"}]
        prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        completions = await self.server.completion(
            prompt=prompt, n=self.config.group_size, max_tokens=24, temperature=0.8
        )
        to_score = [([*messages, {"role": "assistant", "content": c.text}], item[::-1]) for c in completions.choices]
        return await self.score(to_score), []

    async def score(self, rollout_group_data):
        scores = ScoredDataGroup(tokens=[], masks=[], scores=[])
        for chat, expected in rollout_group_data:
            reward = 1.0 if chat[-1]["content"].strip() == expected else 0.0
            out = tokenize_for_trainer(self.tokenizer, chat)
            scores["tokens"].append(out["tokens"])
            scores["masks"].append(out["masks"])
            scores["scores"].append(reward)
            self.percent_correct_buffer.append(reward)
        if len(set(scores["scores"])) <= 1:
            return None  # all the same: no learning signal, skip the group (as text_reversal does)
        return scores

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    EqualScoresEnv.cli()
