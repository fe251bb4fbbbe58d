"""The atroposlib BaseEnv every bundled environment builds on, with a faster join to its run.

atroposlib's start is tuned for many environment instances sharing one run-api: it re-asks to
register once a second while the trainer has not started, and after registering its env_manager
sleeps a fixed ATROPOS_START_PAUSE_S ("wait for other instances to get setup") before its first
rollout. A run here has exactly one environment, so this base asks every REGISTER_POLL_S and its
env_manager runs without that pause: atroposlib.envs.base sees an asyncio whose sleep of exactly
that length returns at once (the only such sleep there; tests/test_environments.py pins it).

It also evaluates every `steps_per_eval` steps, as the setting says: atroposlib evaluates when
`old_step % k > new_step % k` between two status polls, which is never true for k = 1 and misses
a poll that lands on a multiple of k or jumps past one (fast steps); here a step that crosses a
multiple of k starts the evaluation atroposlib did not.

Its log (logs/env.log) is configured by `tinker_atropos.env_logging`, as for every environment.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import atroposlib.envs.base as atropos_base
from atroposlib.envs.base import BaseEnv, EvalHandlingEnum

from tinker_atropos import env_logging

logger = logging.getLogger(__name__)

REGISTER_POLL_S = 0.1
REGISTER_TIMEOUT_S = 60.0
ATROPOS_START_PAUSE_S = 5


class _AsyncioWithoutStartPause:
    """asyncio as atroposlib.envs.base uses it, less the start pause."""

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    @staticmethod
    async def sleep(delay: float, result: Any = None) -> Any:
        return await asyncio.sleep(0 if delay == ATROPOS_START_PAUSE_S else delay, result)


class RunEnv(BaseEnv):
    """BaseEnv for the one environment process of a run."""

    @classmethod
    def cli(cls) -> None:
        env_logging.configure()
        super().cli()

    async def _register_env(self) -> dict[str, Any]:
        """Ask until run-api accepts (it waits for the trainer's first batch request). run-api
        is spawned beside this process, so for REGISTER_TIMEOUT_S it may also not answer yet."""
        waiting_logged = False
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        while True:
            try:
                data: dict[str, Any] = await super()._register_env()
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(REGISTER_POLL_S)
                continue
            if data.get("status") == "success":
                return data
            if not waiting_logged:
                logger.info("run-api answered %r; asking again every %.1f s", data.get("status"), REGISTER_POLL_S)
                waiting_logged = True
            await asyncio.sleep(REGISTER_POLL_S)

    async def env_manager(self) -> None:
        atropos_base.asyncio = _AsyncioWithoutStartPause()  # type: ignore[assignment]
        await super().env_manager()

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
