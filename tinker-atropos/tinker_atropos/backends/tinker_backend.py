"""The Tinker backend: the real SDK behind the same protocol as the local engine.

The SDK retries a dead network for about five minutes before failing. A run must fail fast
instead, saying what to do, so the key is checked before any contact and the first contact
(a capabilities query, which also validates the base model) is bounded in time.

With `trainer.self_hosted` the same SDK talks to a self-hosted Tinker-API engine (SkyRL's) at
tinker_base_url: no Tinker key is sent (tinker_compat.engine_api_key), the SDK gaps are bridged
(tinker_compat), errors name the engine, and `close()` frees the engine's adapter slot.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import tinker
from tinker import types

from tinker_atropos.run_files import CheckpointKind

from ..models.paths import offline_model_named
from ..trainer.config import TinkerConfig
from .base import BackendUnavailable
from .checkpoints import CheckpointStore
from .slot_order import SlotOrder
from .tinker_compat import (
    allow_missing_sequence_ids,
    engine_api_key,
    load_state_into_new_model,
    offline_eos_ids,
    one_per_position,
    stop_at_eos,
    unload_model,
)

KEY_PREFIX = "tml-"
DEFAULT_CONNECT_TIMEOUT_S = 30.0
T = TypeVar("T")


@dataclass(frozen=True)
class Service:
    """Who the trainer talks to, as its error messages name it, and what to check when it fails."""

    name: str
    advice: str
    hint: str = ""  # appended to the service's own errors


TINKER = Service(
    "Tinker",
    "check the network (and proxy settings), that TINKER_BASE_URL / tinker.tinker_base_url points at the "
    "Tinker service, and the Tinker status page; or use tinker.backend: local",
)


def self_hosted_service(url: str) -> Service:
    return Service(
        f"the self-hosted Tinker engine at {url}",
        "check that the engine is running and has loaded its model (`mcp-server-rl doctor` shows its state and "
        "log), and read the engine's log",
        "; `mcp-server-rl doctor` shows the engine's state, and the engine's log says why",
    )


def engine_url(t: TinkerConfig) -> str:
    """The self-hosted engine's URL: tinker.tinker_base_url, else $TINKER_BASE_URL. Required: without
    it the SDK would send the placeholder key to the production service."""
    url = t.tinker_base_url or os.environ.get("TINKER_BASE_URL", "").strip()
    if not url:
        raise BackendUnavailable(
            "trainer.self_hosted is set but no engine URL is: set tinker.tinker_base_url to the "
            "self-hosted Tinker engine's URL (e.g. http://127.0.0.1:8000); `mcp-server-rl doctor` shows the engine"
        )
    return url


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


def _bounded(call: Callable[[], T], timeout: float, what: str, service: Service = TINKER) -> T:
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
    who = _capital(service.name)
    if worker.is_alive():
        raise BackendUnavailable(f"{who} did not answer within {timeout:g} s while trying to {what}: {service.advice}")
    if "error" in box:
        error = box["error"]
        raise BackendUnavailable(f"{who} could not {what}: {error}{service.hint}") from error
    return box["value"]


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _service(t: TinkerConfig) -> Service:
    return self_hosted_service(engine_url(t)) if t.self_hosted else TINKER


def _connect(t: TinkerConfig) -> tinker.ServiceClient:
    """Key check, then a bounded capabilities query that also validates the base model."""
    if t.self_hosted:
        url: str | None = engine_url(t)
        key = engine_api_key(os.environ)
        allow_missing_sequence_ids()  # SkyRL's sample futures carry none; SDK 0.38 asserts them
        what = "list the models it serves"
    else:
        url = t.tinker_base_url
        key = check_api_key()
        what = f"reach the service at {url or os.environ.get('TINKER_BASE_URL') or 'its default URL'}"
    service = _service(t)
    timeout = connect_timeout()
    caps = _bounded(
        lambda: tinker.RestClient(base_url=url, api_key=key).get_server_capabilities().result(timeout),
        timeout,
        what,
        service,
    )
    names = [m.model_name for m in caps.supported_models if m.model_name]
    if names and t.base_model not in names:
        raise BackendUnavailable(
            f"trainer.base_model {t.base_model!r} is not served by {service.name}; choose one of: {', '.join(names)}"
        )
    return tinker.ServiceClient(base_url=url, api_key=key)


def create_tinker_training_client(t: TinkerConfig) -> TinkerTrainingClient:
    if t.resume_from and not t.resume_from.startswith("tinker://"):
        raise BackendUnavailable(
            f"trainer.resume_from={t.resume_from!r}: the Tinker backend resumes from a tinker:// state "
            "(saved by a Tinker run), not a local folder"
        )
    service = _connect(t)
    try:
        if t.resume_from and not t.self_hosted:
            training = service.create_training_client_from_state_with_optimizer(t.resume_from).result()
        else:
            training = service.create_lora_training_client(
                base_model=t.base_model, rank=t.lora_rank, seed=t.seed
            ).result()
            if t.resume_from:  # SkyRL 0.4 takes a state only as a new model's first request (tinker 0.25's way)
                load_state_into_new_model(training, t.resume_from, optimizer=True)
    except Exception as exc:  # the SDK's error types vary by failure
        who = _service(t)
        raise BackendUnavailable(
            f"{_capital(who.name)} could not create the LoRA training client: {exc}{who.hint}"
        ) from exc
    return TinkerTrainingClient(training, t, service)


def create_tinker_sampler(t: TinkerConfig, adapter: str | None = None, base_model: str | None = None) -> TinkerSampler:
    """A sampling client for `adapter` (a tinker:// sampler path), else for `base_model` (default: the run's)."""
    service = _connect(t)
    try:
        if adapter:
            client = service.create_sampling_client(model_path=adapter).result()
        else:
            client = service.create_sampling_client(base_model=base_model or t.base_model).result()
    except Exception as exc:
        who = _service(t)
        raise BackendUnavailable(f"{_capital(who.name)} could not create a sampling client: {exc}{who.hint}") from exc
    return TinkerSampler(client, offline_eos_ids(base_model or t.base_model))


class TinkerSampler:
    """SamplingBackend over a tinker.SamplingClient; `eos_ids` make `stop=None` mean EOS on any engine.
    With `order` (a training client's samplers on a self-hosted engine) requests go out through it."""

    def __init__(self, client: Any, eos_ids: list[int] | None = None, order: SlotOrder | None = None) -> None:
        self.client = client
        self.eos_ids = eos_ids
        self.order = order

    @asynccontextmanager
    async def _client(self) -> AsyncIterator[Any]:
        if self.order is None:
            yield self.client
        else:
            async with self.order.turn() as client:
                yield client

    async def sample_async(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> types.SampleResponse:
        async with self._client() as client:
            return await client.sample(prompt, num_samples, stop_at_eos(sampling_params, self.eos_ids))

    async def compute_logprobs_async(self, prompt: types.ModelInput, from_position: int = 0) -> list[float | None]:
        async with self._client() as client:
            values = await client.compute_logprobs(prompt)  # every position: Tinker has no such option
        return one_per_position(values, prompt.length)


class TinkerTrainingClient:
    """TrainingBackend over a tinker.TrainingClient; checkpoints are indexed locally too."""

    def __init__(self, training: Any, t: TinkerConfig, service: Any = None) -> None:
        self.training = training
        self.service = service
        self.base_model = t.base_model
        self.checkpoints = CheckpointStore(t.run_dir, t.run_name)
        self._engine = (engine_url(t), engine_api_key(os.environ)) if t.self_hosted else None
        # SkyRL's samples run on the slot this model trains: its checkpoints are sampled in order
        self._order = SlotOrder() if t.self_hosted else None
        self._tokenizer: Any = None

    def get_tokenizer(self):
        """The base model's tokenizer. An offline model's (tiny-chat, smollm2-135m) comes from its
        local folder: the SDK would look its name up on the hub, which fails offline."""
        if self._tokenizer is None:
            offline = offline_model_named(self.base_model)
            if offline is None:
                self._tokenizer = self.training.get_tokenizer()
            else:
                from transformers import AutoTokenizer

                from ..models import resolve_model

                self._tokenizer = AutoTokenizer.from_pretrained(resolve_model(offline))
        return self._tokenizer

    def close(self) -> None:
        """At the end of a run on a self-hosted engine: unload the model, which frees its adapter
        slot now rather than when the engine's session times out. Best effort, once; nothing for
        the cloud. Never ServiceClient.close(): the engine has no sessions/finish endpoint."""
        engine, self._engine = self._engine, None
        model_id = getattr(self.training, "model_id", None)
        if engine is None or not model_id:
            return
        url, key = engine
        try:
            timeout = connect_timeout()
        except BackendUnavailable:
            timeout = DEFAULT_CONNECT_TIMEOUT_S
        unload_model(url, str(model_id), timeout, api_key=key)

    async def forward_backward_async(
        self, data: Sequence[types.Datum], loss_fn: str, loss_fn_config: Mapping[str, float] | None = None
    ) -> types.ForwardBackwardOutput:
        """The service's built-in loss, or two passes of its own (tinker_atropos/losses/on_tinker.py)."""
        from tinker_atropos.losses import on_tinker

        return await on_tinker.forward_backward(self.training, data, loss_fn, loss_fn_config, self._engine is not None)

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
        client = await self.training.create_sampling_client(path)
        if self._order is None:
            return TinkerSampler(client, offline_eos_ids(self.base_model))
        self._order.register(client)
        await self._order.load()  # before the next step can change what the engine's slot holds
        return TinkerSampler(client, offline_eos_ids(self.base_model), self._order)
