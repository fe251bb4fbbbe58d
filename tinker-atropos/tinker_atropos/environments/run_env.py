"""The atroposlib BaseEnv every bundled environment builds on.

It applies `tinker_atropos.env_process.atropos_compat` when built, so a bundled environment joins its run
without atroposlib's waits (a fast re-ask to register, no start pause) also where no launcher
applied the fixes: a file run as `python letter_repeat.py serve`, or an instance a test builds.

It also evaluates every `steps_per_eval` steps, as the setting says: atroposlib evaluates when
`old_step % k > new_step % k` between two status polls, which is never true for k = 1 and misses
a poll that lands on a multiple of k or jumps past one (fast steps); here a step that crosses a
multiple of k starts the evaluation atroposlib did not.

Its log (logs/env.log) is configured by `tinker_atropos.env_process.logs`, as for every environment.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from atroposlib.envs.base import BaseEnv, EvalHandlingEnum

from tinker_atropos.env_process import atropos_compat, logs

logger = logging.getLogger(__name__)


class RunEnv(BaseEnv):
    """BaseEnv for the one environment process of a run."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        atropos_compat.apply()
        super().__init__(*args, **kwargs)

    @classmethod
    def cli(cls) -> None:
        logs.configure()
        super().cli()

    async def env_step_checks(self) -> None:
        """atroposlib's step checks, then the evaluation its modulo test missed (module doc)."""
        old, new, runner = self.curr_step, self.status_dict["current_step"], self.eval_runner
        await super().env_step_checks()
        every = self.config.steps_per_eval
        started_one = self.eval_runner is not runner
        idle = self.eval_runner is None or self.eval_runner.done()
        if every > 0 and new // every > old // every and not started_one and idle:
            logger.info("step %d -> %d crossed a multiple of steps_per_eval %d: evaluating", old, new, every)
            self._start_eval()

    def _start_eval(self) -> None:
        """Start an evaluation as atroposlib does: with STOP_TRAIN, the rollouts in flight go back
        to the backlog and their workers stop until it ends."""
        self.eval_runner = asyncio.create_task(self.evaluate())
        if self.config.eval_handling == EvalHandlingEnum.STOP_TRAIN:
            self.backlog.extend(x["item"] for x in self.running_items.values())
            for worker in self.workers:
                worker.cancel()
            self.workers = set()
            self.running_items = {}
