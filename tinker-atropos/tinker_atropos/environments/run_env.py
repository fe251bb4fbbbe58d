"""The atroposlib BaseEnv every bundled environment builds on.

It applies `tinker_atropos.env_process.atropos_compat` when built, so a bundled environment joins its run
without atroposlib's waits (a fast re-ask to register, no start pause) also where no launcher
applied the fixes: a file run as `python letter_repeat.py serve`, or an instance a test builds.

It also evaluates every `steps_per_eval` steps, as the setting says: atroposlib evaluates when
`old_step % k > new_step % k` between two status polls, which is never true for k = 1 and misses
a poll that lands on a multiple of k or jumps past one (fast steps); here a step that crosses a
multiple of k starts the evaluation atroposlib did not.

It draws the training items of the environments the product owns (`tinker_atropos.item_draw`):
`draw_from(items)` gives the next one, each group's outcome goes to its item's record before
atroposlib sends or drops the group, and the draw's state is saved as the environment's data position
at every step it sees (docs/run-files.md), so a resumed run draws on where its parent stopped.
Where a tie is likely it samples a drawn item's group in two parts (`tinker_atropos.item_draw.probe`):
`handle_env` asks the environment's `collect_trajectories` for the probe's replies alone
(`group_replies`), and `handle_send_to_api` stops a probe that tied or asks for the rest of its group.

Its log (logs/env.log) is configured by `tinker_atropos.env_process.logs`, as for every environment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from atroposlib.envs.base import BaseEnv, EvalHandlingEnum

from tinker_atropos.env_process import atropos_compat, logs
from tinker_atropos.environments.evaluations import RunEvaluations
from tinker_atropos.item_draw.draw import ItemDraw
from tinker_atropos.item_draw.ledger import ItemLedger, write_items_file
from tinker_atropos.item_draw.outcomes import group_outcome
from tinker_atropos.item_draw.probe import merge_groups, probe_size
from tinker_atropos.run_files import RunFiles

logger = logging.getLogger(__name__)
T = TypeVar("T")
# The replies of its group that this rollout task samples (None: all): a probe's first ones, then the rest.
_group_part: ContextVar[range | None] = ContextVar("group_part", default=None)


class RunEnv(RunEvaluations, BaseEnv):
    """BaseEnv for the one environment process of a run; how it evaluates: evaluations.py."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        atropos_compat.apply()
        super().__init__(*args, **kwargs)
        self._draw: ItemDraw | None = None
        self._draw_state: dict[str, Any] | None = None  # a saved data position (load_checkpoint sets it)
        self._draws_to_skip = 0  # a resumed run without a saved draw: the items its steps used
        self._drawn: dict[int, int] = {}  # id(item) -> its index, for the outcome of its group
        self._draw_done = False  # every item retired: said once

    # --- the draw (tinker_atropos.item_draw) ---

    @property
    def item_draw(self) -> ItemDraw | None:
        """The product's draw once it has begun; None for an environment drawing its own order."""
        return self._draw

    def draw_from(self, items: Sequence[T]) -> T | None:
        """The next training item of `items`; None once every one is retired as solved (the trainer
        then ends the run as completed: items.json says so)."""
        if not items:
            raise ValueError(
                f"{self.name}: no training items to draw from: fill `train_items` in setup(), or override "
                "get_next_item with an order of your own"
            )
        draw = self._item_draw(len(items))
        index = draw.next()
        if index is None:
            if not self._draw_done:
                logger.info("every training item is retired as solved: no item left to draw")
                self._draw_done = True
                self._write_items()
            return None
        item = items[index]
        self._drawn[id(item)] = index
        return item

    @property
    def group_replies(self) -> range:
        """The indices within its group of the replies `collect_trajectories` samples now: all of them,
        or a probe's part (the module doc). An environment that samples `len(group_replies)` replies
        (the demonstration of an agent's group at index 0) is probed; one that samples `group_size` is
        taken whole as before."""
        return _group_part.get() or range(self.config.group_size)

    async def handle_env(self, item_uuid: str) -> Any:
        """atroposlib's rollout of one item, begun with a probe where a tie is likely."""
        running = self.running_items.get(item_uuid) or {}
        index = self._drawn.get(id(running.get("item")))
        size = 0
        # an environment that sends its tied groups to the trainer (which counts them) is sampled whole
        if self._draw is not None and index is not None and self.config.ensure_scores_are_not_same:
            probe = int(getattr(self.config, "probe_replies", 0))
            size = probe_size(self._draw.ledger, str(index), probe, self.config.group_size)
        if not size:
            return await super().handle_env(item_uuid)
        token = _group_part.set(range(size))
        try:
            return await super().handle_env(item_uuid)
        finally:
            _group_part.reset(token)

    def _item_draw(self, n_items: int) -> ItemDraw:
        if self._draw is None:
            if self._draw_state is not None:
                self._draw = ItemDraw.from_state(self._draw_state)
            else:
                window = int(getattr(self.config, "item_window", 0))
                self._draw = ItemDraw(n_items, int(getattr(self.config, "seed", 0)), ItemLedger(window))
                for _ in range(self._draws_to_skip):
                    self._draw.next()
        return self._draw

    async def handle_send_to_api(self, scored_data: Any, item: Any = None, *args: Any, **kwargs: Any) -> Any:
        """Each group's outcome to its item's record first (atroposlib may drop the group next); a
        probe whose replies differ is joined by the rest of its group, one that tied ends here."""
        part = _group_part.get()
        tokens = scored_data.get("tokens") if isinstance(scored_data, dict) else None
        probed = part is not None and len(tokens or []) == len(part)
        if probed and (outcome := group_outcome(scored_data)) is not None and outcome.tie is None:
            scored_data = await self._rest_of_group(item, scored_data)
            if scored_data is None:
                return None
        index = self._drawn.get(id(item)) if item is not None else None
        if self._draw is not None and index is not None:
            self._draw.ledger.record_groups(str(index), scored_data, probe=probed)
            self._write_items()
        if probed and len(scored_data["tokens"]) < self.config.group_size:
            return None  # a tied probe is the whole group (atroposlib would refuse its size)
        return await super().handle_send_to_api(scored_data, item, *args, **kwargs)

    async def _rest_of_group(self, item: Any, probe: dict[str, Any]) -> dict[str, Any] | None:
        """The probe's group whole: the replies after the probe's, sampled and scored as the probe's were."""
        token = _group_part.set(range(len(probe["tokens"]), self.config.group_size))
        try:
            rest, backlog = await self.collect_trajectories(item)
            self.backlog.extend(backlog)
            if rest:
                rest = await self.postprocess_histories(rest)
        finally:
            _group_part.reset(token)
        if not isinstance(rest, dict) or not rest.get("tokens"):
            logger.warning("the rest of a probed group brought no replies: the probe's replies are not trained")
            return None
        return merge_groups(probe, rest)

    def _write_items(self) -> None:
        run_dir = self.config.data_dir_to_save_evals
        if self._draw is not None and run_dir:
            write_items_file(
                RunFiles(Path(run_dir)).items,
                self._draw.ledger,
                total=self._draw.n_items,
                drawn_by="product",
                all_retired=self._draw_done,
            )

    async def env_step_checks(self) -> None:
        """The evaluation atroposlib's modulo test missed (module doc), then the draw saved as the data
        position of the step just seen."""
        before = self.curr_step
        await self._evaluate_on_crossing()
        if self.curr_step != before and self.checkpoint_dir and self._draw is not None:
            self.save_checkpoint(self.curr_step, {"_draw_state": self._draw.state()})

    def load_checkpoint(self) -> None:
        """On registration at step > 0: the saved draw, else as many draws as the trained steps used."""
        super().load_checkpoint()
        if self.curr_step > 0 and self._draw_state is None:
            self._draws_to_skip = self.curr_step * max(self.config.batch_size // self.config.group_size, 1)
        draws = self._draw_state["draws"] if self._draw_state else self._draws_to_skip
        logger.info("%s: data position: draw %d at step %d", self.name, draws, self.curr_step)

    @classmethod
    def cli(cls) -> None:
        logs.configure()
        super().cli()

    async def _evaluate_on_crossing(self) -> None:
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
