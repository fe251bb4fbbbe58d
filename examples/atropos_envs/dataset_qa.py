"""An Atropos dataset environment: questions from a `datasets` dataset loaded by name in `setup`
(offline here: HF_DATASETS_OFFLINE / HF_HUB_OFFLINE, the cache in HF_DATASETS_CACHE)."""

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer
from datasets import load_dataset
from pydantic import Field


class QAConfig(BaseEnvConfig):
    dataset_name: str = Field("org/capitals", description="The datasets dataset to load (a hub id or a folder)")
    split: str = Field("train", description="Its split")


class CapitalsEnv(BaseEnv):
    name = "capitals_qa"
    env_config_cls = QAConfig

    @classmethod
    def config_init(cls):
        config = QAConfig(wandb_name=cls.name, tokenizer_name="org/some-hub-tokenizer", group_size=4, use_wandb=False)
        return config, [APIServerConfig(model_name="default", base_url="http://localhost:9001/v1", api_key="x")]

    async def setup(self):
        self.rows = load_dataset(self.config.dataset_name, split=self.config.split)
        self.cursor = 0

    async def get_next_item(self):
        row = self.rows[self.cursor % len(self.rows)]
        self.cursor += 1
        return row

    async def collect_trajectories(self, item):
        messages = [{"role": "user", "content": item["question"]}]
        completion = await self.server.chat_completion(
            messages=messages, n=self.config.group_size, max_tokens=8, temperature=1.0
        )
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[])
        for choice in completion.choices:
            reply = choice.message.content or ""
            chat = [*messages, {"role": "assistant", "content": reply}]
            out = tokenize_for_trainer(self.tokenizer, chat, include_messages=True)
            overlap = len(set(reply.lower()) & set(item["answer"].lower())) / len(set(item["answer"].lower()))
            group["tokens"].append(out["tokens"])
            group["masks"].append(out["masks"])
            group["scores"].append(overlap)
            group["messages"].append(out["messages"])
        return group, []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    CapitalsEnv.cli()
