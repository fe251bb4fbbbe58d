"""A multi-step, gym-style Atropos environment: each episode is several model turns, the
environment answering each one (an observation), and the whole conversation is tokenized once with
`tokenize_for_trainer(..., train_on_all_assistant_turns=True)`."""

import asyncio

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer
from pydantic import Field


class WalkConfig(BaseEnvConfig):
    turns: int = Field(2, ge=1, le=5, description="Model turns per episode")
    goal: int = Field(3, description="The position the walker should reach")


def position_after(moves: list[str]) -> int:
    return sum(move.count("r") - move.count("l") for move in moves)


class WalkEnv(BaseEnv):
    name = "walk_steps"
    env_config_cls = WalkConfig

    @classmethod
    def config_init(cls):
        config = WalkConfig(wandb_name=cls.name, tokenizer_name="org/some-hub-tokenizer", group_size=4, use_wandb=False)
        return config, [APIServerConfig(model_name="default", base_url="http://localhost:9001/v1", api_key="x")]

    async def setup(self):
        self.episode = 0

    async def get_next_item(self):
        self.episode += 1
        return self.episode

    async def episode_of(self, item):
        chat = [{"role": "user", "content": f"Walk to {self.config.goal}. Reply with r or l. You are at 0."}]
        moves: list[str] = []
        for _ in range(self.config.turns):
            completion = await self.server.chat_completion(messages=chat, n=1, max_tokens=6, temperature=1.0)
            move = completion.choices[0].message.content or ""
            moves.append(move)
            chat.append({"role": "assistant", "content": move})
            chat.append({"role": "user", "content": f"You are at {position_after(moves)}."})
        chat.pop()  # the last observation: the episode ends on the model's turn
        out = tokenize_for_trainer(self.tokenizer, chat, include_messages=True, train_on_all_assistant_turns=True)
        out["score"] = -abs(self.config.goal - position_after(moves)) - 0.01 * sum(map(len, moves))
        return out

    async def collect_trajectories(self, item):
        episodes = await asyncio.gather(*(self.episode_of(item) for _ in range(self.config.group_size)))
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        for out in episodes:
            group["tokens"].append(out["tokens"])
            group["masks"].append(out["masks"])
            group["scores"].append(out["score"])
            group["messages"].append(out["messages"])
        return group, []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    WalkEnv.cli()
