"""How an environment process evaluates a run (docs/run-files.md): two sets, two files, and the
end-of-run exchange with the trainer through the inference server's /health label.

- the validation set (validation.jsonl): before the first step, every steps_per_eval steps, and on
  the final weights; it picks the run's best checkpoint (tinker_atropos.best_checkpoint);
- the held-out set (eval.jsonl): before the first step, on the final weights, and on the best
  checkpoint, which the trainer then serves under the label `best`.

The trainer labels its last weights `final` when it has no step left to take, also before the
environment has queued every step's rollouts (a run bounded by time): the rollouts then stop.
A base (the chat and the agent one) says what its two sets are and how it scores one of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Literal

from tinker_atropos.best_checkpoint import BEST, best_of
from tinker_atropos.http_tls import shared_tls
from tinker_atropos.inference_server.holder import BEST_LABEL, DONE_LABEL, FINAL_LABEL
from tinker_atropos.run_files import RunFiles, append_jsonl, read_jsonl

logger = logging.getLogger(__name__)

EvalSplit = Literal["validation", "held_out"]  # validation.jsonl, eval.jsonl
# how often the trainer is asked whether it serves its last weights, and how long it may stay
# unreachable before it is taken for gone
FINAL_POLL_S, FINAL_UNREACHABLE_S = 0.2, 10.0
FINAL_WATCH_S = 1.0  # how often a running environment asks whether the trainer has ended (a time budget)


class RunEvaluations:
    """Mixed into the environment's BaseEnv (tinker_atropos.environments.run_env.RunEnv)."""

    # --- what a base provides ---

    def validation_set(self) -> list[Any]:
        return []

    def held_out_set(self) -> list[Any]:
        return []

    async def evaluate_set(
        self, items: list[Any], split: EvalSplit, *, final: bool = False, checkpoint: str | None = None
    ) -> None:
        """Score `items` greedily; one line through write_evaluation."""
        raise NotImplementedError

    # --- the protocol ---

    async def evaluate_both(self) -> None:
        """The base model's scores on a fresh run (step 0 of both files)."""
        await self.evaluate_set(self.validation_set(), "validation")
        await self.evaluate_set(self.held_out_set(), "held_out")

    async def evaluate_periodic(self) -> None:
        """Every steps_per_eval steps: the validation set where there is one, else the held-out set."""
        if self.validation_set():
            await self.evaluate_set(self.validation_set(), "validation")
        else:
            await self.evaluate_set(self.held_out_set(), "held_out")

    async def env_manager(self) -> None:
        """atroposlib returns once every step's rollouts are queued; the final weights come later, or
        before that where the run ends on its time budget (the trainer then serves them early)."""
        if not getattr(self.config, "eval_at_end", False):  # (the sets are not loaded yet: setup runs inside)
            await super().env_manager()  # type: ignore[misc]
            return
        manager = asyncio.create_task(super().env_manager())  # type: ignore[misc]
        watcher = asyncio.create_task(self._final_label_seen())
        await asyncio.wait({manager, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if watcher.done():  # the trainer ended first: no more rollouts
            for task in [manager, *self.workers]:
                task.cancel()
            await asyncio.gather(manager, return_exceptions=True)
        else:
            watcher.cancel()
            manager.result()
            if not await self._final_weights_served():
                return
        logger.info("%s: the trainer serves its final weights: the final evaluations", self.name)
        await self._final_evaluations()

    async def _final_evaluations(self) -> None:
        """The last weights on both sets (validation first: the trainer picks the best checkpoint once
        the held-out line is there), then the best checkpoint on the held-out set if the trainer serves it."""
        await self.evaluate_set(self.validation_set(), "validation", final=True)
        await self.evaluate_set(self.held_out_set(), "held_out", final=True)
        both = self.validation_set() and self.held_out_set()
        if both and await self._wait_for_label((BEST_LABEL, DONE_LABEL), 600.0) == BEST_LABEL:
            await self.evaluate_set(self.held_out_set(), "held_out", final=True, checkpoint=BEST)

    async def evaluation_target(self, final: bool, checkpoint: str | None) -> tuple[int, str | None]:
        """(the step, the weights' name) an evaluation begun now scores."""
        step, weights = await self._served_weights()
        if checkpoint == BEST:  # the weights the trainer picked by the same rule
            best = best_of(read_jsonl(self._files().validation)) if self._files() else None
            return (best.step, best.weights) if best else (step or 0, None)
        if step is None:  # not the product's server: the environment's own count
            step = self.config.total_steps if final else self.curr_step
        return step, weights

    def write_evaluation(
        self,
        split: EvalSplit,
        target: tuple[int, str | None],
        record: dict[str, Any],
        final: bool,
        checkpoint: str | None,
    ) -> dict[str, Any]:
        """One line of the split's file: `record`'s scores with the step, time and weights."""
        step, weights = target
        line = {"step": step, "final": final, "time": time.time(), **record, "weights": weights}
        line.update({"checkpoint": checkpoint} if checkpoint else {})
        if (files := self._files()) is not None:
            append_jsonl(files.validation if split == "validation" else files.evals, line)
        return line

    def _files(self) -> RunFiles | None:
        folder = self.config.data_dir_to_save_evals
        return RunFiles(Path(folder)) if folder else None

    async def _health(self, client: Any) -> dict[str, Any]:
        url = self.server.servers[0].config.base_url.removesuffix("/").removesuffix("/v1") + "/health"
        answer: dict[str, Any] = (await client.get(url)).json()
        return answer

    async def _final_label_seen(self) -> None:
        """Returns once the trainer serves its final weights (polled while the rollouts run)."""
        import httpx

        async with httpx.AsyncClient(timeout=5.0, trust_env=False, verify=shared_tls()) as client:
            while True:
                try:
                    if (await self._health(client)).get("sampler") == FINAL_LABEL:
                        return
                except (httpx.HTTPError, ValueError):
                    pass
                await asyncio.sleep(FINAL_WATCH_S)

    async def _served_weights(self) -> tuple[int | None, str | None]:
        """(the trainer's steps, the name of the weights it serves) from /health; (None, None) where
        the server is not the product's (a hosted endpoint)."""
        import httpx

        try:
            async with httpx.AsyncClient(timeout=5.0, trust_env=False, verify=shared_tls()) as client:
                health = await self._health(client)
        except (httpx.HTTPError, ValueError):
            return None, None
        step = health.get("step")
        if not isinstance(step, int):
            return None, None
        return step, (BEST if health.get("sampler") == BEST_LABEL else health.get("weights"))

    async def _final_weights_served(self, timeout_s: float = 3600.0) -> bool:
        """Wait until the trainer serves its last weights (/health says `final`); False when it
        never does, or its server stays unreachable for 10 s (the trainer is gone)."""
        return await self._wait_for_label((FINAL_LABEL,), timeout_s) == FINAL_LABEL

    async def _wait_for_label(self, labels: tuple[str, ...], timeout_s: float) -> str | None:
        """The first of `labels` /health names within `timeout_s`; None on the timeout, or once the
        server has been unreachable for FINAL_UNREACHABLE_S (the trainer is gone)."""
        import httpx

        deadline = time.monotonic() + timeout_s
        reached = time.monotonic()  # when the trainer's server last answered
        async with httpx.AsyncClient(timeout=5.0, trust_env=False, verify=shared_tls()) as client:
            while time.monotonic() < deadline and time.monotonic() - reached < FINAL_UNREACHABLE_S:
                try:
                    if (label := (await self._health(client)).get("sampler")) in labels:
                        return str(label)
                    reached = time.monotonic()
                except (httpx.HTTPError, ValueError):
                    pass
                await asyncio.sleep(FINAL_POLL_S)  # the final eval starts within this of the last step
        return None
