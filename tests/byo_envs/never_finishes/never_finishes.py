"""An environment whose rollouts never finish (a tool or a judge that never answers): it registers,
evaluates, and then the trainer waits on it for a batch that never comes."""

import asyncio

from tinker_atropos.environments.letter_repeat import LetterRepeatEnv


class NeverFinishesEnv(LetterRepeatEnv):
    name = "never_finishes"

    async def collect_trajectories(self, item):
        await asyncio.Event().wait()  # never set


if __name__ == "__main__":
    NeverFinishesEnv.cli()
