"""The backend protocol: the Tinker SDK's method names, spoken in `tinker.types`.

The trainer and the inference server are written against these two protocols only, so the
same RL loop drives remote Tinker GPUs and the local torch+peft engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from tinker import types


class BackendUnavailable(Exception):
    """The backend cannot be used: missing/malformed key, service unreachable, model not loadable."""


class SamplingBackend(Protocol):
    """A frozen policy snapshot that can sample and score tokens."""

    async def sample_async(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
    ) -> types.SampleResponse:
        """Sequences with their tokens and per-token logprobs."""
        ...

    async def compute_logprobs_async(self, prompt: types.ModelInput, from_position: int = 0) -> list[float | None]:
        """Logprob of each prompt token given the ones before it (None for the first). Positions
        before `from_position` may come back None: the caller does not need them, and a backend
        that keeps the prompt's cache can skip computing them."""
        ...


class TrainingBackend(Protocol):
    """A LoRA training client."""

    base_model: str

    async def forward_backward_async(
        self, data: Sequence[types.Datum], loss_fn: str, loss_fn_config: Mapping[str, float] | None = None
    ) -> types.ForwardBackwardOutput:
        """Accumulate gradients of `loss_fn` over `data` until the next optim_step. `loss_fn_config`:
        the loss's settings by Tinker's names (ppo/cispo clip thresholds, dro's beta); None: defaults."""
        ...

    async def optim_step_async(self, adam_params: types.AdamParams) -> types.OptimStepResponse: ...

    async def save_weights_for_sampler_async(self, name: str) -> str:
        """Save the adapter for sampling; returns its path (a folder or a tinker:// URI)."""
        ...

    async def save_state_async(self, name: str) -> str:
        """Save adapter + optimizer state for resuming; returns its path."""
        ...

    async def load_state_async(self, path: str) -> None: ...

    async def delete_state_async(self, path: str) -> None:
        """Delete a state saved by this client (a pruned training state)."""
        ...

    async def create_sampling_client_async(self, path: str) -> SamplingBackend:
        """A sampler for the weights saved at `path` (by save_weights_for_sampler)."""
        ...

    def get_tokenizer(self):  # -> transformers.PreTrainedTokenizerBase
        ...
