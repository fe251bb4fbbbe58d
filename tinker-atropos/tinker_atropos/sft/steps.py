"""Supervised steps on the run's LoRA adapter: `cross_entropy` on the policy's own tokens of each
example (weight 1, end of turn included; system, user and tool tokens weight 0), through the
backend protocol, so the local engine and a Tinker-API engine train the same way.

The loss is reported per trained token (Tinker sums over tokens and does not normalise).
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
from tinker import types

from tinker_atropos.agent.loop import PROMPT_MASK
from tinker_atropos.backends.base import TrainingBackend
from tinker_atropos.backends.tinker_compat import grad_norm_of, loss_sum_of
from tinker_atropos.sft.examples import Example


def example_datum(example: Example) -> types.Datum:
    """The example shifted onto its targets, weighted 1 where the policy wrote the target."""
    tokens = example.tokens
    weights = (np.asarray(example.masks[1:]) != PROMPT_MASK).astype(np.float32)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.asarray(tokens[1:], dtype=np.int64)),
            "weights": types.TensorData.from_numpy(weights),
        },
    )


def batches(examples: Sequence[Example], batch_size: int, steps: int, seed: int = 0) -> Iterator[list[Example]]:
    """`steps` batches, each example once per epoch in a shuffled order (a short last batch of an
    epoch is filled from the next)."""
    if not examples:
        raise ValueError("no supervised examples to train on")
    rng = random.Random(seed)
    queue: list[Example] = []
    for _ in range(steps):
        while len(queue) < batch_size:
            epoch = list(examples)
            rng.shuffle(epoch)
            queue += epoch
        yield queue[:batch_size]
        del queue[:batch_size]


@dataclass(frozen=True)
class SftStep:
    loss: float | None  # mean cross-entropy per trained token
    trained_tokens: int
    grad_norm: float | None


async def sft_step(training: TrainingBackend, batch: Sequence[Example], adam: types.AdamParams) -> SftStep:
    """One forward_backward of `cross_entropy` over the batch, then one optimizer step."""
    datums = [example_datum(e) for e in batch]
    trained = sum(int(np.asarray(d.loss_fn_inputs["weights"].data).sum()) for d in datums)
    output = await training.forward_backward_async(datums, "cross_entropy")
    optim = await training.optim_step_async(adam)
    total = loss_sum_of(output, datums)
    return SftStep(None if total is None else total / max(trained, 1), trained, grad_norm_of(optim.metrics))
