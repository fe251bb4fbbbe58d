"""reasoning_gym: any task of reasoning-gym (PyPI `reasoning-gym`), generated offline and scored by
the task's own scorer.

The server lists each task as an environment of its own, `reasoning_gym:<task>` (for example
`reasoning_gym:leg_counting`), from reasoning_gym_catalog.json, with the task generator's settings
as config fields; a run of one is a run of this environment with `task` and `task_config` set.
Training problems come from the generator with `seed`, the held-out eval set with `eval_seed`.

The reply is scored by the task's `score_answer` (in [0, 1]) on the text inside its last
`<answer>...</answer>` (what the system prompt asks for), else on the whole reply: a small model
rarely writes the tags at first, and a bare right answer still counts. Correct = a score of 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import reasoning_gym
from atroposlib.envs.base import APIServerConfig
from pydantic import Field, TypeAdapter
from reasoning_gym.factory import DATASETS, ProceduralDataset
from reasoning_gym.utils import SYSTEM_PROMPTS, extract_answer

from tinker_atropos.environments.common import ChatTaskConfig, ChatTaskEnv, Score, Task, local_server_defaults
from tinker_atropos.environments.reasoning_gym_catalog import described_type, task_settings
from tinker_atropos.models.paths import SMOLLM2


class ReasoningGymConfig(ChatTaskConfig):
    task: str = Field(default="leg_counting", description="The reasoning-gym task (its dataset name).")
    task_config: dict[str, Any] = Field(
        default_factory=dict,
        description="The task generator's settings (its config's fields); one left out keeps reasoning-gym's default.",
    )
    num_train_items: int = Field(default=2000, ge=1, description="Training problems generated with `seed`.")
    eval_seed: int = Field(default=1234, description="Seed of the held-out eval problems (fixed across runs).")
    system_prompt: str = Field(default=SYSTEM_PROMPTS["direct"], description="The system message of every problem.")


@dataclass(frozen=True, eq=False)
class GymTask(Task):
    """A generated problem: its entry (question, answer, metadata) and the dataset that scores it."""

    entry: dict[str, Any]
    dataset: ProceduralDataset


def generator_settings(task: str, values: dict[str, Any]) -> dict[str, Any]:
    """`values` (JSON, from the run config) as the task's config takes them; an unknown name is refused
    with the task's settings listed."""
    if task not in DATASETS:
        raise ValueError(f"unknown reasoning-gym task {task!r}: known tasks are {', '.join(sorted(DATASETS))}")
    settings = task_settings(DATASETS[task][1])
    unknown = sorted(set(values) - set(settings))
    if unknown:
        raise ValueError(f"{task} has no setting {', '.join(unknown)}: its settings are {', '.join(sorted(settings))}")
    return {name: TypeAdapter(described_type(*settings[name])).validate_python(value) for name, value in values.items()}


class ReasoningGymEnv(ChatTaskEnv):
    name = "reasoning_gym"
    env_config_cls = ReasoningGymConfig

    @classmethod
    def config_init(cls) -> tuple[ReasoningGymConfig, list[APIServerConfig]]:
        servers = local_server_defaults(model=SMOLLM2)
        config = ReasoningGymConfig(
            wandb_name=cls.name,
            tokenizer_name=servers[0].tokenizer_name,
            group_size=8,
            batch_size=32,
            max_token_length=512,
            max_completion_tokens=48,
            steps_per_eval=10,
            eval_size=64,
            use_wandb=False,
            ensure_scores_are_not_same=False,  # as arithmetic: the trainer counts no-signal groups
        )
        return config, servers

    def load_tasks(self) -> tuple[list[Task], list[Task]]:
        cfg: ReasoningGymConfig = self.config  # type: ignore[assignment]
        settings = generator_settings(cfg.task, cfg.task_config)

        def tasks(seed: int, size: int) -> list[Task]:
            if size == 0:
                return []
            dataset = reasoning_gym.create_dataset(cfg.task, seed=seed, size=size, **settings)
            return [GymTask(e["question"], str(e["answer"]), e, dataset) for e in dataset]

        return tasks(cfg.seed, cfg.num_train_items), tasks(cfg.eval_seed, cfg.eval_size)

    def messages(self, task: Task) -> list[dict[str, str]]:
        cfg: ReasoningGymConfig = self.config  # type: ignore[assignment]
        return [{"role": "system", "content": cfg.system_prompt}, {"role": "user", "content": task.prompt}]

    def score(self, task: Task, reply: str) -> Score:
        assert isinstance(task, GymTask)
        answer = extract_answer(reply)
        reward = float(task.dataset.score_answer(reply.strip() if answer is None else answer, task.entry))
        return Score(reward, reward >= 1.0)


if __name__ == "__main__":
    ReasoningGymEnv.cli()
