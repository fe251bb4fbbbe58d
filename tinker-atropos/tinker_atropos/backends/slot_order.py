"""A training client's sampler checkpoints used in order, on an engine whose samples share the
model's training weights (SkyRL's Tinker-API engine).

There a sample of a sampler checkpoint runs on the model's one adapter slot, the slot it trains:
unless that checkpoint was the last one loaded, it is loaded from disk into the slot first
(skyrl.backends.jax `load_sampler_weights`; saving one does not count as loading it). So a
request for an older checkpoint that arrives after a newer one was loaded, or the first request for
a checkpoint that arrives after the next optim_step, puts older weights back into the slot: the next
steps train from them, and an update is silently lost. Measured against the engine: a state saved
right after a late request for the previous checkpoint held that checkpoint's weights (logprobs equal
to 1e-6), not the newest ones (6.8 nats apart).

`SlotOrder` rules both out. A newer checkpoint's first request is a one-token sample sent when it is
created (`load`), before the trainer's next step, once every request of the older ones has ended;
from then on, a request made through an older checkpoint's sampler goes to the newest one.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tinker import types

DRAIN_POLL_S = 0.01  # requests are called from two event loops (the trainer's, the inference server's)
LOAD_PROMPT = types.ModelInput.from_ints([0])
LOAD_PARAMS = types.SamplingParams(max_tokens=1, temperature=0.0)


class SlotOrder:
    """The sampling clients of one training client, newest last, and their requests in flight."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._newest = 0  # the newest checkpoint's number (later ones are newer)
        self._client: Any = None  # its client: an older one is only reached through it
        self._in_flight: dict[int, int] = {}

    def register(self, client: Any) -> None:
        """A newly created checkpoint's client: from now on every request goes to it."""
        with self._lock:
            self._newest += 1
            self._client = client
            self._in_flight[self._newest] = 0

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[Any]:
        """The client to send one request with: the newest checkpoint's (an older sampler's
        requests go to it too), once no request of an older checkpoint is in flight."""
        while True:
            with self._lock:
                newest = self._newest
                if not any(n for k, n in self._in_flight.items() if k < newest):
                    self._in_flight[newest] += 1
                    client = self._client
                    break
            await asyncio.sleep(DRAIN_POLL_S)
        try:
            yield client
        finally:
            with self._lock:
                self._in_flight[newest] -= 1
                if self._in_flight[newest] == 0 and newest != self._newest:
                    del self._in_flight[newest]

    async def load(self) -> None:
        """The newest checkpoint's first request: the engine loads it into the slot now, before
        anything else can change what the slot holds."""
        async with self.turn() as client:
            await client.sample(LOAD_PROMPT, 1, LOAD_PARAMS)
