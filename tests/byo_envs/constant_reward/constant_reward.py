"""An environment with a broken reward: every reply scores 1.0, so no group carries a learning signal.

It sends its all-equal groups to the trainer (`ensure_scores_are_not_same=False`), as an environment
that keeps them does, so the run takes steps and its metrics show the missing signal."""

from atroposlib.envs.base import APIServerConfig

from tinker_atropos.environments.common import Score, Task
from tinker_atropos.environments.letter_repeat import LetterRepeatConfig, LetterRepeatEnv


class ConstantRewardEnv(LetterRepeatEnv):
    name = "constant_reward"

    @classmethod
    def config_init(cls) -> tuple[LetterRepeatConfig, list[APIServerConfig]]:
        config, servers = super().config_init()
        return LetterRepeatConfig(
            **{**config.model_dump(), "wandb_name": cls.name, "ensure_scores_are_not_same": False}
        ), servers

    def score(self, task: Task, reply: str) -> Score:
        return Score(1.0, False)


if __name__ == "__main__":
    ConstantRewardEnv.cli()
