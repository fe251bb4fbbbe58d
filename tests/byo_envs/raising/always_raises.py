"""An environment whose every rollout raises (a reward reading a field its items do not have)."""

from tinker_atropos.environments.letter_repeat import LetterRepeatEnv


class AlwaysRaisesEnv(LetterRepeatEnv):
    name = "always_raises"

    async def collect_trajectories(self, item):
        return self.score_from(item)

    def score_from(self, item):
        return {"letter": item}["answer"]  # KeyError: 'answer'


if __name__ == "__main__":
    AlwaysRaisesEnv.cli()
