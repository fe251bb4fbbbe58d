"""An Atropos environment on `managed_server`: exact tokens, masks and logprobs from the server's
state (`tokens_and_masks` style), with a `config_init` that returns one `APIServerConfig` (not a
list), as many upstream environments do."""

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup
from pydantic import Field


class CountConfig(BaseEnvConfig):
    start: int = Field(1, ge=0, description="First number of the count the model continues")


class CountOnEnv(BaseEnv):
    name = "count_on"
    env_config_cls = CountConfig

    @classmethod
    def config_init(cls):
        config = CountConfig(
            wandb_name=cls.name, tokenizer_name="org/some-hub-tokenizer", group_size=4, use_wandb=False
        )
        server = APIServerConfig(model_name="default", base_url="http://localhost:9001/v1", api_key="x")
        return config, server

    async def setup(self):
        self.next_start = self.config.start

    async def get_next_item(self):
        self.next_start += 1
        return self.next_start

    async def collect_trajectories(self, item):
        messages = [{"role": "user", "content": f"Count on from {item}: {item}, {item + 1},"}]
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            completion = await managed.chat_completion(
                messages=messages, n=self.config.group_size, max_tokens=10, temperature=1.0
            )
            nodes = managed.get_state()["nodes"]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[], messages=[])
        for choice, node in zip(completion.choices, nodes):
            reply = choice.message.content or ""
            digits = sum(ch.isdigit() for ch in reply) / max(len(reply), 1)
            group["tokens"].append(node.tokens)
            group["masks"].append(node.masked_tokens)
            group["inference_logprobs"].append(node.logprobs)
            group["scores"].append(digits)
            group["messages"].append([*messages, {"role": "assistant", "content": reply}])
        return group, []

    async def evaluate(self, *args, **kwargs):
        return None


if __name__ == "__main__":
    CountOnEnv.cli()
