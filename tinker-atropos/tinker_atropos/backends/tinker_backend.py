"""The Tinker backend: the real SDK behind the same protocol as the local engine.

The SDK retries a dead network for about five minutes before failing. A run must fail fast
instead, saying what to do, so the key is checked before any contact and the first contact
(a capabilities query, which also validates the base model) is bounded in time.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import tinker
from tinker import types

from tinker_atropos.run_files import CheckpointKind

from ..config import TinkerConfig
from .base import BackendUnavailable
from .checkpoints import CheckpointStore

KEY_PREFIX = "tml-"
DEFAULT_CONNECT_TIMEOUT_S = 30.0
T = TypeVar("T")


def check_api_key() -> str:
    """TINKER_API_KEY, checked for presence and prefix (its value is never echoed)."""
    key = os.environ.get("TINKER_API_KEY", "").strip()
    if not key:
        raise BackendUnavailable(
            "TINKER_API_KEY is not set: export TINKER_API_KEY=tml-... (a key from the Tinker "
            "console) in the environment that starts the trainer, or use tinker.backend: local"
        )
    if not key.startswith(KEY_PREFIX):
        raise BackendUnavailable(
            f"TINKER_API_KEY does not start with '{KEY_PREFIX}': it is not a Tinker API key; "
            "copy the key from the Tinker console (it looks like tml-...)"
        )
    return key


def connect_timeout() -> float:
    """Seconds allowed for the first contact: $TINKER_CONNECT_TIMEOUT, else 30."""
    raw = os.environ.get("TINKER_CONNECT_TIMEOUT")
    try:
        value = float(raw) if raw else DEFAULT_CONNECT_TIMEOUT_S
    except ValueError:
        raise BackendUnavailable(f"TINKER_CONNECT_TIMEOUT={raw!r} is not a number of seconds") from None
    return value if value > 0 else DEFAULT_CONNECT_TIMEOUT_S


def _bounded(call: Callable[[], T], timeout: float, what: str) -> T:
    """Run `call` in a daemon thread; give up after `timeout` s (the thread dies with the process)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=run, name="tinker-first-contact", daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        raise BackendUnavailable(
            f"Tinker did not answer within {timeout:g} s while trying to {what}: check the network "
            "(and proxy settings), that TINKER_BASE_URL / tinker.tinker_base_url points at the "
            "Tinker service, and the Tinker status page; or use tinker.backend: local"
        )
    if "error" in box:
        raise BackendUnavailable(f"Tinker could not {what}: {box['error']}") from box["error"]
    return box["value"]


def _connect(t: TinkerConfig) -> tinker.ServiceClient:
    """Key check, then a bounded capabilities query that also validates the base model."""
    key = check_api_key()
    timeout = connect_timeout()
    caps = _bounded(
        lambda: tinker.RestClient(base_url=t.tinker_base_url, api_key=key).get_server_capabilities().result(timeout),
        timeout,
        f"reach the service at {t.tinker_base_url or os.environ.get('TINKER_BASE_URL') or 'its default URL'}",
    )
    names = [m.model_name for m in caps.supported_models if m.model_name]
    if names and t.base_model not in names:
        raise BackendUnavailable(
            f"tinker.base_model {t.base_model!r} is not served by Tinker; choose one of: {', '.join(names)}"
        )
    return tinker.ServiceClient(base_url=t.tinker_base_url, api_key=key)


def create_tinker_training_client(t: TinkerConfig) -> TinkerTrainingClient:
    if t.resume_from and not t.resume_from.startswith("tinker://"):
        raise BackendUnavailable(
            f"tinker.resume_from={t.resume_from!r}: the Tinker backend resumes from a tinker:// state "
            "(saved by a Tinker run), not a local folder"
        )
    service = _connect(t)
    try:
        if t.resume_from:
            training = service.create_training_client_from_state_with_optimizer(t.resume_from).result()
        else:
            training = service.create_lora_training_client(
                base_model=t.base_model, rank=t.lora_rank, seed=t.seed
            ).result()
    except Exception as exc:  # the SDK's error types vary by failure
        raise BackendUnavailable(f"Tinker could not create the LoRA training client: {exc}") from exc
    return TinkerTrainingClient(training, t, service)


def create_tinker_sampler(t: TinkerConfig, adapter: str | None = None) -> TinkerSampler:
    service = _connect(t)
    try:
        if adapter:
            client = service.create_sampling_client(model_path=adapter).result()
        else:
            client = service.create_sampling_client(base_model=t.base_model).result()
    except Exception as exc:
        raise BackendUnavailable(f"Tinker could not create a sampling client: {exc}") from exc
    return TinkerSampler(client)


class TinkerSampler:
    """SamplingBackend over a tinker.SamplingClient."""

    def __init__(self, client: Any) -> None:
        self.client = client

    async def sample_async(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> types.SampleResponse:
        return await self.client.sample(prompt, num_samples, sampling_params)

    async def compute_logprobs_async(self, prompt: types.ModelInput, from_position: int = 0) -> list[float | None]:
        return await self.client.compute_logprobs(prompt)  # every position: Tinker has no such option


class TinkerTrainingClient:
    """TrainingBackend over a tinker.TrainingClient; checkpoints are indexed locally too."""

    def __init__(self, training: Any, t: TinkerConfig, service: Any = None) -> None:
        self.training = training
        self.service = service
        self.base_model = t.base_model
        self.checkpoints = CheckpointStore(t.run_dir, t.run_name)

    def get_tokenizer(self):
        return self.training.get_tokenizer()

    async def forward_backward_async(self, data: Sequence[types.Datum], loss_fn: str) -> types.ForwardBackwardOutput:
        return await self.training.forward_backward(list(data), loss_fn)

    async def optim_step_async(self, adam_params: types.AdamParams) -> types.OptimStepResponse:
        return await self.training.optim_step(adam_params)

    async def save_weights_for_sampler_async(self, name: str) -> str:
        path = (await self.training.save_weights_for_sampler(name)).path
        self.checkpoints.record(CheckpointKind.SAMPLER_WEIGHTS, name, path)
        return path

    async def save_state_async(self, name: str) -> str:
        path = (await self.training.save_state(name)).path
        self.checkpoints.record(CheckpointKind.WEIGHTS, name, path)
        return path

    async def load_state_async(self, path: str) -> None:
        with warnings.catch_warnings():  # deprecated in favour of a new client; same effect here
            warnings.simplefilter("ignore", FutureWarning)
            await self.training.load_state_with_optimizer(path)

    async def delete_state_async(self, path: str) -> None:
        if self.service is not None:
            await self.service.create_rest_client().delete_checkpoint_from_tinker_path_async(path)

    async def create_sampling_client_async(self, path: str) -> TinkerSampler:
        return TinkerSampler(await self.training.create_sampling_client(path))
