"""A run made to fall: letter_repeat with many distinct prompts (so a validation set is drawn from
them), whose greedy evaluations score every item right while the trainer is at step 6 or before and none
after, as a run whose
curve peaks early and falls. Training rollouts keep letter_repeat's reward, so every step trains."""

from atroposlib.envs.base import APIServerConfig

from tinker_atropos.environments.common import Score, Task
from tinker_atropos.environments.letter_repeat import LetterRepeatConfig, LetterRepeatEnv

PEAK_STEP = 6


class FallingValidationEnv(LetterRepeatEnv):
    name = "falling_validation"

    @classmethod
    def config_init(cls) -> tuple[LetterRepeatConfig, list[APIServerConfig]]:
        config, servers = super().config_init()
        fields = {**config.model_dump(), "wandb_name": cls.name, "eval_size": 4, "steps_per_eval": 1}
        return LetterRepeatConfig(**fields), servers

    def load_tasks(self) -> tuple[list[Task], list[Task]]:
        train, held_out = super().load_tasks()
        numbered = [Task(f"{t.prompt} (item {i})", t.answer) for i, t in enumerate(train)]
        return numbered, [Task(f"{t.prompt} (held-out {i})", t.answer) for i, t in enumerate(held_out)]

    async def score_greedy(self, task: Task) -> Score:
        await super().score_greedy(task)  # a real greedy reply through the run's server
        steps, _ = await self._served_weights()  # the trainer's (the environment's own count runs ahead)
        up = steps is not None and steps <= PEAK_STEP
        return Score(1.0 if up else 0.0, up)


if __name__ == "__main__":
    FallingValidationEnv.cli()
