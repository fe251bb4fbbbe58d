"""The atroposlib BaseEnv every bundled environment builds on, with a faster join to its run.

atroposlib's start is tuned for many environment instances sharing one run-api: it re-asks to
register once a second while the trainer has not started, and after registering it waits a fixed
5 s ("for other instances") before its first rollout. A run here has exactly one environment, so
this base asks every REGISTER_POLL_S and starts its first rollouts at once: the 5 s pause then
overlaps the first step's sampling instead of preceding it.

Its log (logs/env.log, which rl-mcp serves as a resource) gets timestamps at INFO; atroposlib's
env loop logs its status at every turn (ten times a second) and the HTTP clients every request,
so only their warnings are kept.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any

from atroposlib.envs.base import BaseEnv

logger = logging.getLogger(__name__)

REGISTER_POLL_S = 0.1


class RunEnv(BaseEnv):
    """BaseEnv for the one environment process of a run."""

    @classmethod
    def cli(cls) -> None:
        logging.basicConfig(
            stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        for noisy in ("atroposlib.envs.base", "httpx", "httpx2", "httpcore"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
        super().cli()

    async def register_env(self) -> None:
        await super().register_env()
        logger.info("registered with run-api as environment %s, at step %s", self.env_id, self.curr_step)

    async def _register_env(self) -> dict[str, Any]:
        """Ask until run-api accepts (it waits for the trainer's first batch request)."""
        waiting_logged = False
        while True:
            data: dict[str, Any] = await super()._register_env()
            if data.get("status") == "success":
                return data
            if not waiting_logged:
                logger.info("run-api answered %r; asking again every %.1f s", data.get("status"), REGISTER_POLL_S)
                waiting_logged = True
            await asyncio.sleep(REGISTER_POLL_S)

    async def get_server_info(self) -> None:
        """Then, before env_manager's fixed pause, the first loop turn: status and workers."""
        await super().get_server_info()
        await self.get_status()
        await self.add_train_workers()
