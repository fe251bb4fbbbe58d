"""Shout a word back in capital letters: a custom Atropos environment that needs no download.

Point rl-mcp at this folder (`RL_MCP_ENV_DIRS=/path/to/examples/custom_env`) and it appears in
`rl_list_environments` as `word_shout`. Run it by hand like any Atropos environment:

    python word_shout.py serve --config runs/<id>/config.yaml
    python word_shout.py process --env.total_steps 2 --openai.base_url http://127.0.0.1:<port>/v1

It follows docs/run-files.md: one line per evaluation in `eval.jsonl` under
`env.data_dir_to_save_evals`, and `overrides[i]["correct"]` feeds the trainer's percent_correct.
It is meant for a pretrained model (the tinker profile, or a local profile with base model
`smollm2-135m`): the randomly initialised tiny-chat model scores 0 everywhere, which gives GRPO
no signal (letter_repeat's shaped reward is what lets tiny-chat learn).
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path
from typing import Any

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup
from pydantic import Field

from tinker_atropos.models.paths import TINY_CHAT, model_ref

WORDS = (
    "apple", "river", "stone", "cloud", "tiger", "maple", "ocean", "pixel", "lemon", "robot",
    "candle", "forest", "planet", "silver", "garden", "rocket", "winter", "bridge", "yellow",
    "castle", "dragon", "button", "pencil", "window", "spider", "copper", "meadow", "harbor",
    "violet", "thunder", "saddle", "falcon", "marble", "lantern", "walnut", "breeze",
)  # fmt: skip
EVAL_WORDS = ("orange", "desert", "pepper", "summer", "anchor", "shadow", "kettle", "ribbon")
_WORD = re.compile(r"[A-Za-z]+")


def shout_score(word: str, completion: str) -> float:
    """1.0 for the word in capitals as the first word, 0.5 for the right word in another case.

    The half credit gives a small model a gradient towards the capitals before it gets them right.
    """
    first = _WORD.search(completion)
    if first is None:
        return 0.0
    answer = first.group(0)
    if answer == word.upper():
        return 1.0
    return 0.5 if answer.lower() == word.lower() else 0.0


def shout_prompt(word: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "Answer with a single word."},
        {"role": "user", "content": f"Write the word {word} in capital letters."},
    ]


class WordShoutConfig(BaseEnvConfig):
    seed: int = Field(default=0, description="Seed of the order in which training words are drawn")
    max_completion_tokens: int = Field(default=8, ge=1, le=256, description="Tokens sampled per completion")
    temperature: float = Field(default=1.0, ge=0.0, le=2.0, description="Sampling temperature")


class WordShoutEnv(BaseEnv):
    """Repeat a given word in capital letters (exact: 1, right word wrong case: 0.5)."""

    name = "word_shout"
    env_config_cls = WordShoutConfig

    @classmethod
    def config_init(cls) -> tuple[WordShoutConfig, list[APIServerConfig]]:
        """Defaults for a standalone `process` run against a local inference server.

        Under rl-mcp the run's config.yaml replaces the tokenizer, URLs and step counts.
        """
        tokenizer = model_ref(TINY_CHAT)  # the offline tiny model's folder
        env_config = WordShoutConfig(
            group_size=8,
            batch_size=32,
            total_steps=20,
            steps_per_eval=10,
            max_token_length=256,
            use_wandb=False,
            wandb_name=cls.name,
            tokenizer_name=tokenizer,
        )
        server = APIServerConfig(
            model_name=TINY_CHAT,
            base_url="http://127.0.0.1:8001/v1",
            api_key="local",
            server_type="sglang",  # real tokens and logprobs flow back
            tokenizer_name=tokenizer,
        )
        return env_config, [server]

    async def setup(self) -> None:
        self.order = random.Random(self.config.seed)
        self.percent_correct: list[float] = []

    async def get_next_item(self) -> str:
        return self.order.choice(WORDS)

    async def _sample(self, word: str, n: int, temperature: float) -> list[Any]:
        """`n` replies as ManagedServer nodes: tokens, prompt mask and sampler logprobs aligned."""
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            await managed.chat_completion(
                messages=shout_prompt(word),
                n=n,
                max_tokens=self.config.max_completion_tokens,
                temperature=temperature,
            )
            return managed.get_state()["nodes"]

    def reply_text(self, node: Any) -> str:
        """The reply as the trainer will see it: the unmasked tokens, decoded."""
        reply = [t for t, m in zip(node.tokens, node.masked_tokens) if m != -100]
        return self.tokenizer.decode(reply, skip_special_tokens=True)

    async def collect_trajectories(self, item: str) -> tuple[ScoredDataGroup | None, list]:
        nodes = await self._sample(item, self.config.group_size, self.config.temperature)
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[], overrides=[])
        for node in nodes:
            score = shout_score(item, self.reply_text(node))
            group["tokens"].append(node.tokens)
            group["masks"].append(node.masked_tokens)
            group["inference_logprobs"].append(node.logprobs)
            group["scores"].append(score)
            group["overrides"].append({"correct": score == 1.0})  # -> percent_correct
            self.percent_correct.append(1.0 if score == 1.0 else 0.0)
        return group, []

    async def wandb_log(self, wandb_metrics: dict | None = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.percent_correct:
            wandb_metrics["train/percent_correct"] = sum(self.percent_correct) / len(self.percent_correct)
            self.percent_correct = []
        await super().wandb_log(wandb_metrics)

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """Greedy answers on held-out words; one line appended to eval.jsonl."""
        correct = 0
        for word in EVAL_WORDS:
            (node,) = await self._sample(word, 1, 0.0)
            correct += shout_score(word, self.reply_text(node)) == 1.0
        accuracy = correct / len(EVAL_WORDS)
        if self.config.data_dir_to_save_evals:
            line = {
                "step": self.curr_step,
                "time": time.time(),
                "eval_accuracy": accuracy,
                "num_items": len(EVAL_WORDS),
            }
            path = Path(self.config.data_dir_to_save_evals) / "eval.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("a") as f:
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    WordShoutEnv.cli()
