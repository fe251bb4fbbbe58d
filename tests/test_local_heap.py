"""A local training step leaves no freed activations resident (tinker_atropos.backends.local.heap)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tinker import types

from tinker_atropos.backends.local import LocalTrainingClient, load_base_model
from tinker_atropos.backends.local.heap import _malloc_trim

pytestmark = pytest.mark.skipif(_malloc_trim() is None, reason="the C library has no malloc_trim (not glibc)")


def _kb(field: str) -> int:
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field))
    return int(line.split()[1])


def _batch(rows: int, length: int) -> list[types.Datum]:
    gen = torch.Generator().manual_seed(0)
    data = []
    for _ in range(rows):
        tokens = torch.randint(0, 200, (length + 1,), generator=gen)
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1].tolist()),
                loss_fn_inputs={"target_tokens": tokens[1:], "weights": torch.ones(length)},
            )
        )
    return data


def test_a_training_step_gives_its_freed_activations_back(tmp_path: Path) -> None:
    client = LocalTrainingClient(load_base_model("tiny-chat", "cpu"), rank=4, run_dir=tmp_path, run_name="t")
    data = _batch(rows=12, length=1024)  # rows that share nothing: passes of whole rows
    client.forward_backward(data[:1], "cross_entropy")  # first-call set-up out of the figures
    Path("/proc/self/clear_refs").write_text("5")  # the peak resident size starts again from now
    before = _kb("VmRSS:")
    asyncio.run(client.forward_backward_async(data, "cross_entropy"))  # a worker thread, as the trainer runs it
    peak, after = _kb("VmHWM:") - before, _kb("VmRSS:") - before
    assert peak > 150_000, f"the step held only {peak} kB at once: too small to tell"
    assert after < peak / 4, f"{after} kB of the step's {peak} kB peak still resident"
