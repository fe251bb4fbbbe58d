"""gsm8k_tinker: grade-school math with numeric answer verification.

Uses the Hugging Face gsm8k set when it loads within `hf_timeout` seconds, else (offline) a
generated set of word problems, deterministic for `seed`. Reward 1 for the right final number
(after `####`, else the last number in the reply), 0 otherwise; percent_correct is reported per
step and a greedy evaluation on held-out problems goes to eval.jsonl every `steps_per_eval`.
"""

from __future__ import annotations

from typing import Literal

from atroposlib.envs.base import APIServerConfig
from pydantic import Field

from tinker_atropos.environments.common import (
    ChatTaskConfig,
    ChatTaskEnv,
    Score,
    Task,
    local_server_defaults,
)
from tinker_atropos.environments.gsm8k_data import generate_problems, is_correct, load_hf_gsm8k

SYSTEM_PROMPT = (
    "Solve the math word problem. Think step by step, then give the final answer as a number "
    "on its own line in the form '#### <number>'."
)


class Gsm8kConfig(ChatTaskConfig):
    dataset: Literal["auto", "hf", "generated"] = Field(
        default="auto", description="auto: the HF set when reachable, else generated problems."
    )
    hf_timeout: float = Field(default=20.0, gt=0, description="Seconds to wait for the HF set.")
    num_generated: int = Field(default=2000, ge=1, description="Training problems when generated.")


class Gsm8kTinkerEnv(ChatTaskEnv):
    name = "gsm8k_tinker"
    env_config_cls = Gsm8kConfig

    @classmethod
    def config_init(cls) -> tuple[Gsm8kConfig, list[APIServerConfig]]:
        config = Gsm8kConfig(
            wandb_name=cls.name,
            tokenizer_name=local_server_defaults()[0].tokenizer_name,
            group_size=8,
            batch_size=32,
            max_token_length=1024,
            max_completion_tokens=512,
            steps_per_eval=25,
            eval_size=50,
            use_wandb=False,
        )
        return config, local_server_defaults()

    def load_tasks(self) -> tuple[list[Task], list[Task]]:
        cfg: Gsm8kConfig = self.config  # type: ignore[assignment]
        loaded = None if cfg.dataset == "generated" else load_hf_gsm8k(cfg.hf_timeout)
        if loaded is None and cfg.dataset == "hf":
            raise RuntimeError("dataset: hf, but the gsm8k set could not be loaded from the hub")
        if loaded is not None:
            train, test = loaded
        else:
            train = generate_problems(cfg.num_generated, cfg.seed)
            test = generate_problems(max(cfg.eval_size, 1), cfg.seed + 1_000_003)
        to_task = lambda p: Task(p.question, p.answer)  # noqa: E731
        return [to_task(p) for p in train], [to_task(p) for p in test[: cfg.eval_size]]

    def messages(self, task: Task) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task.prompt}]

    def score(self, task: Task, reply: str) -> Score:
        correct = is_correct(reply, task.answer)
        return Score(1.0 if correct else 0.0, correct)


if __name__ == "__main__":
    Gsm8kTinkerEnv.cli()
