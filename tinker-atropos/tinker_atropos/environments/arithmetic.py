"""arithmetic: generated sums, differences and small products, answered with just the number.

Offline, sized for SmolLM2-135M-Instruct (`smollm2-135m`), which gets 7 of the 64 held-out sums
(level 1) right before training (greedy): it writes `75 + 5 = 120`, or explains instead of
answering. The problems, the split (disjoint from training, identical across runs) and the reward
live in arithmetic_data.py.

Reward (in [0, 1]), shaped so a group of replies is rarely all-equal for a small model:
    1.0   the reply is exactly the number
    0.7   the reply's last number is the answer (right, with extra words)
    0.3 * closeness of the reply's last number to the answer, otherwise; 0 with no number.
Correct (percent_correct, eval accuracy) = the reply's last number is the answer.
"""

from __future__ import annotations

from atroposlib.envs.base import APIServerConfig
from pydantic import Field

from tinker_atropos.environments.arithmetic_data import arithmetic_reward, is_correct, question, split
from tinker_atropos.environments.common import ChatTaskConfig, ChatTaskEnv, Score, Task, local_server_defaults
from tinker_atropos.models.paths import SMOLLM2


class ArithmeticConfig(ChatTaskConfig):
    level: int = Field(default=1, ge=1, le=3, description="1: sums; 2: and differences; 3: and small products.")
    num_train_items: int = Field(default=4096, ge=1, description="Training problems (none of them in the eval set).")
    eval_seed: int = Field(default=1234, description="Seed of the held-out eval set (fixed across runs).")


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
        train, evals = split(cfg.level, cfg.eval_size, cfg.eval_seed, cfg.num_train_items, cfg.seed)
        return [Task(t, str(a)) for t, a in train], [Task(t, str(a)) for t, a in evals]

    def messages(self, task: Task) -> list[dict[str, str]]:
        return [{"role": "user", "content": question(task.prompt)}]

    def score(self, task: Task, reply: str) -> Score:
        answer = int(task.answer)
        return Score(arithmetic_reward(reply, answer), is_correct(reply, answer))


if __name__ == "__main__":
    ArithmeticEnv.cli()
