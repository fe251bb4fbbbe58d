"""letter_repeat: write the named letter N times; offline, learnable by the tiny local model.

"Repeat this letter 8 times: q" -> "qqqqqqqq". Nothing to download, and a randomly initialised
tiny model can climb it, because the reward is dense and shaped.

Each reply character earns credit: 1 for the target letter, `pool_credit` for another of the
task's letters, `letter_credit` for any other ASCII letter (footholds from random init), else 0.
The reward is the summed credit over max(repeat_count, reply length), in [0, 1]: the target
letter at least repeat_count times and nothing else scores 1, other characters dilute it.
Correct (percent_correct, eval accuracy) means the reply is exactly the letter repeat_count times.

Measured (local backend, tiny-chat, lr 1e-3, group 8, batch 32, 60 steps on 2 cores): the mean
reward goes from about 0.02 to about 0.5 as the model learns to write the task's letters; picking
the named one (eval accuracy above 0) takes longer than that.
"""

from __future__ import annotations

import random
import string

from atroposlib.envs.base import APIServerConfig
from pydantic import Field

from tinker_atropos.environments.common import (
    ChatTaskConfig,
    ChatTaskEnv,
    Score,
    Task,
    local_server_defaults,
)


class LetterRepeatConfig(ChatTaskConfig):
    letters: str = Field(default="abc", min_length=1, description="Target letters to draw from.")
    repeat_count: int = Field(default=8, ge=1, le=64, description="How many times to repeat the letter.")
    pool_credit: float = Field(
        default=0.25, ge=0.0, le=1.0, description="Credit for one of `letters` that is not the target."
    )
    letter_credit: float = Field(default=0.05, ge=0.0, le=1.0, description="Credit for any other ASCII letter.")
    num_train_items: int = Field(default=512, ge=1)


def letter_reward(
    reply: str,
    letter: str,
    repeat_count: int,
    pool: str = "",
    pool_credit: float = 0.0,
    letter_credit: float = 0.0,
) -> float:
    """Summed per-character credit over max(repeat_count, len(reply)), in [0, 1]."""

    def credit(ch: str) -> float:
        if ch == letter:
            return 1.0
        if ch in pool:
            return pool_credit
        return letter_credit if ch in string.ascii_letters else 0.0

    return sum(map(credit, reply)) / max(repeat_count, len(reply))


class LetterRepeatEnv(ChatTaskEnv):
    name = "letter_repeat"
    env_config_cls = LetterRepeatConfig

    @classmethod
    def config_init(cls) -> tuple[LetterRepeatConfig, list[APIServerConfig]]:
        config = LetterRepeatConfig(
            wandb_name=cls.name,
            tokenizer_name=local_server_defaults()[0].tokenizer_name,
            group_size=8,
            batch_size=32,
            max_token_length=256,
            max_completion_tokens=12,
            steps_per_eval=10,
            eval_size=12,
            use_wandb=False,
        )
        return config, local_server_defaults()

    def load_tasks(self) -> tuple[list[Task], list[Task]]:
        cfg: LetterRepeatConfig = self.config  # type: ignore[assignment]
        rng = random.Random(cfg.seed)

        def task(letter: str) -> Task:
            return Task(f"Repeat this letter {cfg.repeat_count} times: {letter}", letter)

        train = [task(rng.choice(cfg.letters)) for _ in range(cfg.num_train_items)]
        evals = [task(cfg.letters[i % len(cfg.letters)]) for i in range(cfg.eval_size)]
        return train, evals

    def messages(self, task: Task) -> list[dict[str, str]]:
        return [{"role": "user", "content": task.prompt}]

    def score(self, task: Task, reply: str) -> Score:
        cfg: LetterRepeatConfig = self.config  # type: ignore[assignment]
        reward = letter_reward(reply, task.answer, cfg.repeat_count, cfg.letters, cfg.pool_credit, cfg.letter_credit)
        return Score(reward, reply == task.answer * cfg.repeat_count)


if __name__ == "__main__":
    LetterRepeatEnv.cli()
