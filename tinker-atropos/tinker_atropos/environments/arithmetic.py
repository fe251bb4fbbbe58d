"""arithmetic: generated sums, differences and small products, answered with just the number.

Offline, sized for SmolLM2-135M-Instruct (`smollm2-135m`), which gets about one in seven of these
right before training: it mostly explains instead of answering. Difficulty is graded by `level`:
1 = one- and two-digit sums, 2 = adds two-digit differences, 3 = adds products of 2..12 by 2..12.

The held-out eval set is drawn first from its own seed (`eval_seed`) and no training item repeats
one of its problems, so the eval is disjoint from training and identical across runs.

Reward (in [0, 1]), shaped so a group of replies is rarely all-equal for a small model:
    1.0   the reply is exactly the number
    0.7   the reply's last number is the answer (right, with extra words)
    0.3 * closeness of the reply's last number to the answer, otherwise; 0 with no number.
Correct (percent_correct, eval accuracy) = the reply's last number is the answer.
"""

from __future__ import annotations

import random
import re

from atroposlib.envs.base import APIServerConfig
from pydantic import Field

from tinker_atropos.environments.common import ChatTaskConfig, ChatTaskEnv, Score, Task, local_server_defaults
from tinker_atropos.models.paths import SMOLLM2

_NUMBER = re.compile(r"-?\d+")
_OPS = {1: "+", 2: "+-", 3: "+-*"}


class ArithmeticConfig(ChatTaskConfig):
    level: int = Field(default=2, ge=1, le=3, description="1: sums; 2: and differences; 3: and small products.")
    num_train_items: int = Field(default=4096, ge=1, description="Training problems (none of them in the eval set).")
    eval_seed: int = Field(default=1234, description="Seed of the held-out eval set (fixed across runs).")


def problem(rng: random.Random, level: int) -> tuple[str, int]:
    """One problem (text, answer) of the given level."""
    op = rng.choice(_OPS[level])
    if op == "*":
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        return f"{a} * {b}", a * b
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    if op == "-":
        a, b = max(a, b), min(a, b)
        return f"{a} - {b}", a - b
    return f"{a} + {b}", a + b


def last_number(reply: str) -> int | None:
    numbers = _NUMBER.findall(reply.replace(",", ""))
    return int(numbers[-1]) if numbers else None


def arithmetic_reward(reply: str, answer: int) -> float:
    """The ladder in the module docstring."""
    if reply.strip().rstrip(".") == str(answer):
        return 1.0
    last = last_number(reply)
    if last is None:
        return 0.0
    if last == answer:
        return 0.7
    return round(0.3 * max(0.0, 1.0 - abs(last - answer) / max(abs(answer), 10)), 4)


class ArithmeticEnv(ChatTaskEnv):
    name = "arithmetic"
    env_config_cls = ArithmeticConfig

    @classmethod
    def config_init(cls) -> tuple[ArithmeticConfig, list[APIServerConfig]]:
        servers = local_server_defaults(model=SMOLLM2)
        config = ArithmeticConfig(
            wandb_name=cls.name,
            tokenizer_name=servers[0].tokenizer_name,
            group_size=8,
            batch_size=32,
            max_token_length=256,
            max_completion_tokens=16,
            steps_per_eval=10,
            eval_size=64,
            use_wandb=False,
            # send groups whose replies all scored the same too: the trainer skips them, and its
            # metrics then show how many gave no signal (no_signal_share) instead of hiding them
            ensure_scores_are_not_same=False,
        )
        return config, servers

    def load_tasks(self) -> tuple[list[Task], list[Task]]:
        cfg: ArithmeticConfig = self.config  # type: ignore[assignment]
        eval_rng, train_rng = random.Random(cfg.eval_seed), random.Random(cfg.seed)
        evals: dict[str, Task] = {}
        while len(evals) < cfg.eval_size:
            text, answer = problem(eval_rng, cfg.level)
            evals.setdefault(text, Task(text, str(answer)))
        train: list[Task] = []
        for _ in range(100 * cfg.num_train_items):  # bounded: a tiny problem space could run out
            if len(train) == cfg.num_train_items:
                break
            text, answer = problem(train_rng, cfg.level)
            if text not in evals:
                train.append(Task(text, str(answer)))
        return train, list(evals.values())

    def messages(self, task: Task) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"What is {task.prompt}? Answer with just the number."}]

    def score(self, task: Task, reply: str) -> Score:
        answer = int(task.answer)
        return Score(arithmetic_reward(reply, answer), last_number(reply) == answer)


if __name__ == "__main__":
    ArithmeticEnv.cli()
