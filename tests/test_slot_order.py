"""The order in which a trainer's sampler checkpoints reach a self-hosted engine (slot_order.py).
tests/test_skyrl_engine.py shows against SkyRL's engine that a late request through an older sampler
leaves the trained weights in place; here, with clients that record what reaches them, that a new
checkpoint's first request waits for the older ones' requests in flight."""

from __future__ import annotations

import anyio
import pytest
from tinker import types

from tinker_atropos.backends.slot_order import SlotOrder
from tinker_atropos.backends.tinker_backend import TinkerSampler

pytestmark = pytest.mark.anyio
PROMPT = types.ModelInput.from_ints([1, 2, 3])


class Checkpoint:
    """A sampling client of one checkpoint: what reached it, in order, into a shared log."""

    def __init__(self, name: str, log: list[str], hold: anyio.Event | None = None) -> None:
        self.name, self.log, self.hold = name, log, hold

    async def sample(self, prompt: types.ModelInput, n: int, params: types.SamplingParams) -> str:
        self.log.append(f"{self.name} starts {prompt.length}")
        if self.hold is not None:
            await self.hold.wait()
        self.log.append(f"{self.name} ends {prompt.length}")
        return self.name

    async def compute_logprobs(self, prompt: types.ModelInput) -> list[float]:
        self.log.append(f"{self.name} logprobs")
        return [0.0] * (prompt.length - 1)


async def test_a_new_checkpoint_is_loaded_after_the_older_requests_and_takes_every_later_one() -> None:
    log: list[str] = []
    order, hold = SlotOrder(), anyio.Event()
    first = Checkpoint("s1", log, hold)
    order.register(first)
    old = TinkerSampler(first, order=order)
    params = types.SamplingParams(max_tokens=4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(old.sample_async, PROMPT, 1, params)  # a long generation on s1, in flight
        await anyio.sleep(0.05)
        order.register(Checkpoint("s2", log))
        tg.start_soon(order.load)  # s2's first request: not before s1's request has ended
        await anyio.sleep(0.1)
        assert log == ["s1 starts 3"]
        hold.set()
    assert log == ["s1 starts 3", "s1 ends 3", "s2 starts 1", "s2 ends 1"]
    # a request made through the older sampler goes to the newest checkpoint: s1 is never loaded again
    assert await old.sample_async(PROMPT, 1, params) == "s2" and log[-1] == "s2 ends 3"
    assert await old.compute_logprobs_async(PROMPT) == [None, 0.0, 0.0] and log[-1] == "s2 logprobs"
