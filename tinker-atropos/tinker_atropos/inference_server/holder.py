"""The live sampler behind the inference server, swapped by the trainer after every step."""

from __future__ import annotations

import threading

from tinker_atropos.backends.base import SamplingBackend

FINAL_LABEL = "final"  # /health's `sampler` once the trainer has no more steps to take
BEST_LABEL = "best"  # then the run's best checkpoint by validation, for the held-out set to score it
DONE_LABEL = "done"  # then: no more evaluations are waited for


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
        self._label: str | None = None
        self._weights: str | None = None  # the newest step-N weights' name (a relabel keeps it)
        self._steps: int | None = None  # the trainer's steps taken (a step with nothing to train publishes none)

    def swap(self, sampler: SamplingBackend, label: str | None = None) -> int:
        """Install `sampler` for every later request; returns the new version number. `label`
        names its weights (the trainer's checkpoint name: step-000003, ..., final)."""
        with self._lock:
            self._sampler = sampler
            self._version += 1
            self._label = label
            if label and label.startswith("step-"):
                self._weights = label
            return self._version

    def relabel(self, label: str) -> None:
        """Name the weights served now (the trainer marks its last ones `final`)."""
        with self._lock:
            self._label = label

    @property
    def label(self) -> str | None:
        with self._lock:
            return self._label

    @property
    def weights(self) -> str | None:
        """The name of the newest step-N weights published (what `final` serves)."""
        with self._lock:
            return self._weights

    @property
    def steps(self) -> int | None:
        with self._lock:
            return self._steps

    @steps.setter
    def steps(self, value: int) -> None:
        with self._lock:
            self._steps = value

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
