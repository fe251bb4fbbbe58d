"""The validation split of an environment that generates its items: drawn from the training pool,
then no longer trained on, so it is disjoint from training and (as the pool is) from the held-out set.

The periodic evaluations score it and pick the run's best checkpoint (tinker_atropos.best_checkpoint);
the held-out set is scored only before the first step and at the end. An environment with a
validation set of its own returns it from `load_validation` instead.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from typing import TypeVar

from pydantic import BaseModel, Field

T = TypeVar("T")
MIN_POOL_SHARE = 4  # the pool keeps at least this many times the validation set's items: else no split


class ValidationSettings(BaseModel):
    """The split's size, shared by the chat and the agent environments that generate their items."""

    validation_size: int | None = Field(
        default=None,
        ge=0,
        description="Items drawn from the training pool (no longer trained on) as the validation set, scored "
        "every steps_per_eval steps: it picks the run's best checkpoint. null: eval_size; 0: no validation "
        "set (the periodic evaluations then score the held-out set).",
    )

    def validation_items(self, eval_size: int) -> int:
        return eval_size if self.validation_size is None else self.validation_size


def carve_validation(
    pool: list[T], size: int, seed: int, key: Callable[[T], Hashable], held_out: list[T]
) -> tuple[list[T], list[T]]:
    """(training, validation): `size` distinct items drawn with `seed` from those not in `held_out`,
    every item sharing a key with one of them taken out of training. A pool too small to spare them
    gives no validation set."""
    tested = {key(item) for item in held_out}
    distinct = [item for k, item in {key(item): item for item in pool}.items() if k not in tested]
    if size <= 0 or len(distinct) < MIN_POOL_SHARE * size:
        return pool, []
    validation = random.Random(seed).sample(distinct, size)
    taken = {key(item) for item in validation}
    return [item for item in pool if key(item) not in taken], validation
