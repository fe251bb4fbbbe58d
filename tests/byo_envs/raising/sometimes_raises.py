"""An environment whose rollouts raise for every third item only: the run goes on."""

from tinker_atropos.environments.letter_repeat import LetterRepeatEnv


class SometimesRaisesEnv(LetterRepeatEnv):
    name = "sometimes_raises"
    rollouts = 0

    async def collect_trajectories(self, item):
        self.rollouts += 1
        if self.rollouts % 3 == 0:
            raise ValueError(f"item {self.rollouts} has no answer")
        return await super().collect_trajectories(item)


if __name__ == "__main__":
    SometimesRaisesEnv.cli()
