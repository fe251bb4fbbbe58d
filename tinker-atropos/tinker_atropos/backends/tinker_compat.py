"""What a self-hosted Tinker-API engine (SkyRL's) needs from the SDK side of the trainer.

SkyRL 0.4.0 serves the Tinker REST API as tinker 0.25 spoke it, while the trainer runs SDK 0.38.
The gaps are small and all on the client side: sample futures carry no sequence ids, the engine
does no auth (but the SDK insists on a `tml-` key), its metrics use other keys and no `loss:sum`,
the SDK has no call that frees the engine's adapter slot, and its sampler stops at EOS only when
told to. Nothing here changes what the
trainer sends to or reads from the cloud service.
"""

from __future__ import annotations

import functools
import logging
import threading
import uuid
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
from tinker import types

from tinker_atropos.http_tls import shared_tls

from .base import BackendUnavailable

logger = logging.getLogger(__name__)

ENGINE_KEY_ENV = "TINKER_ENGINE_API_KEY"
PLACEHOLDER_KEY = "tml-self-hosted"
"""Sent to a self-hosted engine when TINKER_ENGINE_API_KEY is unset. Not a secret: the engine does
no auth, but the SDK refuses a key without the `tml-` prefix (and would otherwise fall back to
TINKER_API_KEY or ~/.tinker/credentials.json, the user's real cloud key)."""
GRAD_NORM_KEYS = ("grad_norm", "skyrl.ai/grad_norm")
"""The optimizer step's gradient norm: Tinker's key, then SkyRL's (its jax backend's metrics)."""

_MINTED = "_tinker_atropos_mints_sequence_ids"  # marks our wrapper, so a second call is a no-op
_patch_lock = threading.Lock()


def allow_missing_sequence_ids() -> bool:
    """Let SDK 0.38 accept sample futures that carry no `sample_sequence_ids`.

    SDK 0.38 stamps the ids of the submitted sample onto the returned sequences and asserts they
    are there (`sampling_client._attach_sequence_ids`); SkyRL, written for tinker 0.25, sends none,
    so every sample and compute_logprobs would fail. The module attribute is looked up at call
    time, so wrapping it once fixes both: missing ids are replaced by unique local ones (nothing
    in the trainer refers back to them), ids that are present pass through unchanged.

    Idempotent and thread-safe. Returns whether the wrapper is in place; an SDK without that
    function (another version) is left alone, with one log line.
    """
    from tinker.lib.public_interfaces import sampling_client as module

    with _patch_lock:
        original = getattr(module, "_attach_sequence_ids", None)
        if original is None:
            logger.info(
                "tinker %s has no sampling_client._attach_sequence_ids: sequence ids left as the SDK handles them",
                _sdk_version(),
            )
            return False
        if getattr(original, _MINTED, False):
            return True

        def attach(response: types.SampleResponse, sample_sequence_ids: list[str] | None) -> types.SampleResponse:
            if sample_sequence_ids is None:
                sample_sequence_ids = [f"local-{uuid.uuid4().hex}" for _ in response.sequences]
            stamped: types.SampleResponse = original(response, sample_sequence_ids)
            return stamped

        setattr(attach, _MINTED, True)
        attach.__wrapped__ = original  # type: ignore[attr-defined]
        module._attach_sequence_ids = attach
        return True


def engine_api_key(environ: Mapping[str, str]) -> str:
    """The key to send a self-hosted engine: $TINKER_ENGINE_API_KEY, else PLACEHOLDER_KEY.

    Never TINKER_API_KEY: the user's cloud key must not leave for an engine that is not Tinker.
    A set key must pass the SDK's own prefix check, or the SDK fails later with a less clear error.
    """
    key = environ.get(ENGINE_KEY_ENV, "").strip()
    if not key:
        return PLACEHOLDER_KEY
    if not key.startswith("tml-"):
        raise BackendUnavailable(
            f"{ENGINE_KEY_ENV} does not start with 'tml-', which the Tinker SDK requires of every key; "
            "unset it (an engine without auth needs none) or give the engine a key that starts with tml-"
        )
    return key


def grad_norm_of(metrics: Mapping[str, Any] | None) -> float | None:
    """The optimizer step's gradient norm, under Tinker's key or SkyRL's; None if neither is there."""
    for key in GRAD_NORM_KEYS:
        value = (metrics or {}).get(key)
        if value is not None:
            return float(value)
    return None


def loss_sum_of(
    output: types.ForwardBackwardOutput, datums: Sequence[types.Datum], engine: Sequence[float] | None = None
) -> float | None:
    """The step's summed loss: `loss:sum` when the backend reports it (Tinker, the local engine).

    SkyRL reports no `loss:sum`, only each datum's `elementwise_loss`. Tinker defines that as the
    per-token loss already multiplied by the datum's weights (cross_entropy: -logprob * weights),
    and `loss:sum` as its plain sum, so the fallback sums it as is, each row cut to its datum's
    tokens, and divided by the factor its advantages were sent with for the engine's reduction
    (`engine`, losses/on_tinker.py). None when the outputs do not match the datums one to one or any
    lacks the field.
    """
    reported = (output.metrics or {}).get("loss:sum")
    if reported is not None:
        return float(reported)
    outputs = output.loss_fn_outputs
    if not datums or len(outputs) != len(datums):
        return None
    total = 0.0
    for out, datum, factor in zip(outputs, datums, engine or [1.0] * len(datums)):
        losses = out.get("elementwise_loss")
        if losses is None:
            return None
        total += float(losses.to_numpy().reshape(-1)[: datum.model_input.length].astype("float64").sum()) / factor
    return total


def unload_model(base_url: str, model_id: str, timeout: float, api_key: str | None = None) -> bool:
    """Ask a self-hosted engine to unload `model_id`, freeing its adapter slot now.

    SDK 0.38 has no unload call, and the engine otherwise frees the slot only when the session
    times out; with a few slots, the next run would be refused until then. Best effort: a failure
    is logged, never raised (the run's result is already written). Returns whether it was accepted.
    """
    url = f"{base_url.rstrip('/')}/api/v1/unload_model"
    headers = {"X-API-Key": api_key} if api_key else {}
    try:
        response = httpx.post(url, json={"model_id": model_id}, headers=headers, timeout=timeout, verify=shared_tls())
        response.raise_for_status()
    except Exception as exc:  # best effort: refused, unreachable, a malformed URL alike
        logger.warning(
            "could not unload model %s from the self-hosted Tinker engine at %s: %s", model_id, base_url, exc
        )
        return False
    logger.info("unloaded model %s from the self-hosted Tinker engine at %s", model_id, base_url)
    return True


def _sdk_version() -> str:
    try:
        from tinker import __version__

        return str(__version__)
    except ImportError:  # pragma: no cover - every release has it
        return "(unknown version)"


def load_state_into_new_model(training: Any, path: str, *, optimizer: bool) -> None:
    """Load a saved state into a just-created LoRA model, as tinker 0.25 did. SDK 0.38's
    create_training_client_from_state sends `load_weights` addressed by session and sequence id,
    which SkyRL 0.4 refuses (422: model_id required); it takes a load addressed by model id as the
    model's first request after create_model."""
    with warnings.catch_warnings():  # deprecated in the SDK in favour of the call SkyRL refuses
        warnings.simplefilter("ignore", FutureWarning)
        if optimizer:
            training.load_state_with_optimizer(path).result()
        else:
            training.load_state(path).result()


def one_per_position(values: Sequence[float | None], length: int) -> list[float | None]:
    """compute_logprobs' answer as the protocol has it: one value per prompt token, None for the
    first. SkyRL 0.4 leaves that first None out (measured: 311 values for 312 tokens)."""
    out = list(values)
    return [None, *out] if len(out) == length - 1 else out


def stop_at_eos(params: types.SamplingParams, eos_ids: Sequence[int] | None) -> types.SamplingParams:
    """`stop=None` made explicit as the model's EOS ids. The protocol (and the local sampler) reads
    None as "stop at EOS"; SkyRL 0.4's sampler stops only at the stops it is given, so its replies ran
    past `<|im_end|>` to max_tokens (measured on SmolLM2: EOS, then a newline)."""
    if params.stop is not None or not eos_ids:
        return params
    return params.model_copy(update={"stop": [int(i) for i in eos_ids]})


@functools.cache
def offline_eos_ids(base_model: str) -> list[int] | None:
    """The EOS ids of an offline model (its generation config's, else its tokenizer's); None for
    another model, whose service knows its own EOS."""
    from ..models import eos_id_list, resolve_model
    from ..models.paths import offline_model_named

    name = offline_model_named(base_model)
    if name is None:
        return None
    from transformers import AutoTokenizer, GenerationConfig

    folder = resolve_model(name)
    try:
        generation_eos = GenerationConfig.from_pretrained(folder).eos_token_id
    except OSError:
        generation_eos = None
    return eos_id_list(generation_eos, AutoTokenizer.from_pretrained(folder).eos_token_id)
