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

Its log (logs/env.log) is configured by `tinker_atropos.env_process.logs`, as for every environment.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from atroposlib.envs.base import BaseEnv, EvalHandlingEnum

from tinker_atropos.env_process import atropos_compat, logs
from tinker_atropos.item_draw.draw import ItemDraw
from tinker_atropos.item_draw.ledger import ItemLedger, write_items_file
from tinker_atropos.run_files import RunFiles

logger = logging.getLogger(__name__)
T = TypeVar("T")


class RunEnv(BaseEnv):
    """BaseEnv for the one environment process of a run."""

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
        """Each group's outcome to its item's record first (atroposlib may drop the group next)."""
        index = self._drawn.get(id(item)) if item is not None else None
        if self._draw is not None and index is not None:
            self._draw.ledger.record_groups(str(index), scored_data)
            self._write_items()
        return await super().handle_send_to_api(scored_data, item, *args, **kwargs)

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
