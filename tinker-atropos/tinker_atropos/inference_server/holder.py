"""The live sampler behind the inference server, swapped by the trainer after every step."""

from __future__ import annotations

import threading

from tinker_atropos.backends.base import SamplingBackend


class SamplerNotReady(RuntimeError):
    """No sampler has been loaded yet (the server answers 503)."""


class SamplerHolder:
    """Holds the newest sampler. Thread-safe: the trainer swaps from its own thread or loop.

    A request takes the sampler once, at its start, and keeps that reference, so a request in
    flight finishes on the sampler it started with while new requests see the new one.
    """

    def __init__(self, sampler: SamplingBackend | None = None) -> None:
        self._lock = threading.Lock()
        self._sampler = sampler
        self._version = 0 if sampler is None else 1

    def swap(self, sampler: SamplingBackend) -> int:
        """Install `sampler` for every later request; returns the new version number."""
        with self._lock:
            self._sampler = sampler
            self._version += 1
            return self._version

    def current(self) -> tuple[SamplingBackend, int]:
        """The sampler to use for one whole request, with its version."""
        with self._lock:
            if self._sampler is None:
                raise SamplerNotReady("the model is still loading")
            return self._sampler, self._version

    @property
    def ready(self) -> bool:
        with self._lock:
            return self._sampler is not None

    @property
    def version(self) -> int:
        with self._lock:
            return self._version
