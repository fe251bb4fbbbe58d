"""The trainer's side of a self-hosted Tinker-API engine (SkyRL's), with no engine: the SDK 0.38
gaps (sample sequence ids, the key), SkyRL's metric keys, the unload call and the offline tokenizer.
Where HTTP is involved, a loopback server records what the SDK and the trainer send."""

from __future__ import annotations

import http.server
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tinker import types
from tinker.lib._auth_token_provider import ApiKeyAuthProvider
from tinker.lib.public_interfaces import sampling_client

from tinker_atropos.backends.base import BackendUnavailable
from tinker_atropos.backends.factory import create_training_backend
from tinker_atropos.backends.tinker_backend import TinkerTrainingClient
from tinker_atropos.backends.tinker_compat import (
    PLACEHOLDER_KEY,
    allow_missing_sequence_ids,
    engine_api_key,
    grad_norm_of,
    loss_sum_of,
    offline_eos_ids,
    stop_at_eos,
    unload_model,
)
from tinker_atropos.models import model_dir
from tinker_atropos.trainer.config import parse_run_config

CLOUD_KEY = "tml-the-users-real-cloud-key"


# --- sample sequence ids --------------------------------------------------------------------


@pytest.fixture
def sdk_attach(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The SDK's own _attach_sequence_ids, in place for the test (unwrapped where an earlier test in
    this process patched it, as SkyRL's story does); the module attribute is restored after it."""
    current = sampling_client._attach_sequence_ids
    original = getattr(current, "__wrapped__", current)
    monkeypatch.setattr(sampling_client, "_attach_sequence_ids", original)
    return original


def _response(n: int, ids: list[str] | None = None) -> types.SampleResponse:
    return types.SampleResponse(
        sequences=[
            types.SampledSequence(
                stop_reason="stop",
                sequence_id=None if ids is None else ids[i],  # type: ignore[arg-type]  # as the SDK decodes SkyRL's
                _tokens_list=[7, i],
                _logprobs_list=[-0.5, -1.0],
            )
            for i in range(n)
        ]
    )


def test_sdk_038_refuses_a_sample_future_without_sequence_ids(sdk_attach: Any) -> None:
    """Why the patch exists: what SkyRL's futures (no sample_sequence_ids) meet in SDK 0.38."""
    with pytest.raises(AssertionError, match="sample_sequence_ids"):
        sampling_client._attach_sequence_ids(_response(2), None)


def test_missing_sequence_ids_are_minted_unique(sdk_attach: Any) -> None:
    assert allow_missing_sequence_ids() is True
    first = sampling_client._attach_sequence_ids(_response(3), None)
    second = sampling_client._attach_sequence_ids(_response(3), None)
    ids = [seq.sequence_id for seq in [*first.sequences, *second.sequences]]
    assert all(isinstance(i, str) and i for i in ids)
    assert len(set(ids)) == 6  # unique within a response and across responses
    assert [seq.tokens for seq in first.sequences] == [[7, 0], [7, 1], [7, 2]]  # the rest as sent
    assert [seq.logprobs for seq in first.sequences] == [[-0.5, -1.0]] * 3


def test_present_sequence_ids_pass_through_unchanged(sdk_attach: Any) -> None:
    allow_missing_sequence_ids()
    out = sampling_client._attach_sequence_ids(_response(2), ["cloud-a", "cloud-b"])
    assert [seq.sequence_id for seq in out.sequences] == ["cloud-a", "cloud-b"]
    with pytest.raises(AssertionError, match="1 sequence ids for 2 sequences"):  # the SDK's own check stays
        sampling_client._attach_sequence_ids(_response(2), ["only-one"])


def test_the_patch_is_applied_once(sdk_attach: Any) -> None:
    assert allow_missing_sequence_ids() is True
    wrapped = sampling_client._attach_sequence_ids
    assert wrapped is not sdk_attach and wrapped.__wrapped__ is sdk_attach
    assert allow_missing_sequence_ids() is True
    assert sampling_client._attach_sequence_ids is wrapped  # not wrapped twice


def test_an_sdk_without_the_function_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delattr(sampling_client, "_attach_sequence_ids")
    with caplog.at_level(logging.INFO, logger="tinker_atropos.backends.tinker_compat"):
        assert allow_missing_sequence_ids() is False
    assert not hasattr(sampling_client, "_attach_sequence_ids")
    lines = [r.getMessage() for r in caplog.records if r.name == "tinker_atropos.backends.tinker_compat"]
    assert len(lines) == 1 and "has no sampling_client._attach_sequence_ids" in lines[0]


# --- the key --------------------------------------------------------------------------------


def test_the_placeholder_passes_the_sdks_prefix_check() -> None:
    key = engine_api_key({})
    assert key == PLACEHOLDER_KEY
    assert ApiKeyAuthProvider(key).api_key == key  # the SDK's own check, which raises otherwise


def test_the_cloud_key_is_never_the_engine_key() -> None:
    assert engine_api_key({"TINKER_API_KEY": CLOUD_KEY}) == PLACEHOLDER_KEY
    env = {"TINKER_API_KEY": CLOUD_KEY, "TINKER_ENGINE_API_KEY": " tml-engine-key "}
    assert engine_api_key(env) == "tml-engine-key"
    assert engine_api_key({"TINKER_API_KEY": CLOUD_KEY, "TINKER_ENGINE_API_KEY": "  "}) == PLACEHOLDER_KEY


def test_an_engine_key_the_sdk_would_refuse_is_named_not_echoed() -> None:
    with pytest.raises(BackendUnavailable, match="TINKER_ENGINE_API_KEY does not start with 'tml-'") as err:
        engine_api_key({"TINKER_ENGINE_API_KEY": "sk-secret-value"})
    assert "sk-secret-value" not in str(err.value)


# --- the metrics ----------------------------------------------------------------------------


def _datum(n: int, weights: list[float] | None = None) -> types.Datum:
    inputs = {"target_tokens": types.TensorData.from_numpy(np.arange(1, n + 1, dtype=np.int64))}
    if weights is not None:
        inputs["weights"] = types.TensorData.from_numpy(np.asarray(weights, dtype=np.float32))
    return types.Datum(model_input=types.ModelInput.from_ints(list(range(n))), loss_fn_inputs=inputs)


def _output(rows: list[list[float] | None], metrics: dict[str, float] | None = None) -> types.ForwardBackwardOutput:
    outputs = [
        {"logprobs": types.TensorData.from_numpy(np.full(len(row or [0]), -1.0, dtype=np.float32))}
        | ({} if row is None else {"elementwise_loss": types.TensorData.from_numpy(np.asarray(row, np.float32))})
        for row in rows
    ]
    return types.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics=metrics or {}
    )


def test_loss_sum_is_the_reported_one_when_there() -> None:
    output = _output([[0.5, 0.25]], {"loss:sum": 3.75})
    assert loss_sum_of(output, [_datum(2)]) == 3.75  # wins over the elementwise rows


def test_loss_sum_falls_back_to_the_elementwise_losses_as_they_are() -> None:
    """SkyRL reports no loss:sum. Tinker's elementwise_loss already carries the weights
    (-logprob * weights), so the weights are not applied a second time."""
    datums = [_datum(3, weights=[0.0, 2.0, -1.0]), _datum(2, weights=[1.0, 1.0])]
    output = _output([[0.0, -0.5, 2.0], [0.25, 1.125]])
    assert loss_sum_of(output, datums) == 2.875  # exact: every value and partial sum is a short binary fraction


def test_loss_sum_counts_only_each_datums_tokens() -> None:
    output = _output([[1.0, 2.0, 99.0], [4.0]])  # a row longer than its datum: padding, not loss
    assert loss_sum_of(output, [_datum(2), _datum(1)]) == 7.0


def test_loss_sum_is_unknown_without_either() -> None:
    assert loss_sum_of(_output([None, None]), [_datum(1), _datum(1)]) is None
    assert loss_sum_of(_output([[1.0], None]), [_datum(1), _datum(1)]) is None  # one row short: not a sum
    assert loss_sum_of(_output([[1.0]]), [_datum(1), _datum(1)]) is None  # outputs do not match the datums


def test_grad_norm_under_either_key() -> None:
    assert grad_norm_of(types.OptimStepResponse(metrics={"grad_norm": 2.5}).metrics) == 2.5
    assert grad_norm_of(types.OptimStepResponse(metrics={"skyrl.ai/grad_norm": 0.75}).metrics) == 0.75
    assert grad_norm_of({"grad_norm": 1.0, "skyrl.ai/grad_norm": 9.0}) == 1.0
    assert grad_norm_of({"skyrl.ai/learning_rate": 1e-4}) is None
    assert grad_norm_of(types.OptimStepResponse().metrics) is None


def test_no_stop_becomes_the_models_eos_ids_and_a_given_stop_is_kept() -> None:
    eos = offline_eos_ids("tiny-chat")
    assert eos == [256, 258]  # tiny-chat's generation config lists two
    assert offline_eos_ids("smollm2-135m") == [2]
    assert stop_at_eos(types.SamplingParams(max_tokens=4), eos).stop == [256, 258]
    for given in (["\n\n"], [7], []):  # `[]` is Tinker's "no stop at all": kept as the caller said
        assert stop_at_eos(types.SamplingParams(max_tokens=4, stop=given), eos).stop == given
    assert stop_at_eos(types.SamplingParams(max_tokens=4), None).stop is None
    assert offline_eos_ids("Qwen/Qwen3-8B") is None  # a service's own model: its service knows its EOS


# --- HTTP: the engine's side, recorded --------------------------------------------------------


class Recorder:
    """A loopback HTTP server: every request recorded (method, path, X-API-Key, JSON body); a few
    paths answered as SkyRL answers them, the rest 404."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.requests: list[tuple[str, str, str | None, Any]] = []
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(size) if size else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                recorder.requests.append((self.command, self.path, self.headers.get("X-API-Key"), body))
                path = self.path.split("?")[0]
                status, payload = (200, answers[path]) if path in answers else (404, {"detail": "Not Found"})
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def engine() -> Iterator[Recorder]:
    recorder = Recorder(
        {
            "/api/v1/client/config": {},
            "/api/v1/get_server_capabilities": {"supported_models": [{"model_name": "smollm2-135m"}]},
            "/api/v1/unload_model": {"request_id": "7", "model_id": "model-1"},
        }
    )
    yield recorder
    recorder.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cfg(tmp_path: Path, url: str | None, **tinker: Any):
    return parse_run_config(
        {
            "trainer": {
                "backend": "tinker",
                "base_model": "tiny-chat",
                "total_steps": 1,
                "api_url": "http://127.0.0.1:1",
                "inference_port": 2,
                "run_dir": str(tmp_path),
                "tinker_base_url": url,
                "self_hosted": True,
                **tinker,
            }
        }
    )


def test_the_sdk_sends_the_engine_the_placeholder_never_the_cloud_key(
    engine: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sdk_attach: Any
) -> None:
    """Through the SDK's own clients: every request to the engine carries the placeholder, and the
    refusal names the engine, not Tinker."""
    monkeypatch.setenv("TINKER_API_KEY", CLOUD_KEY)
    monkeypatch.delenv("TINKER_ENGINE_API_KEY", raising=False)
    monkeypatch.setenv("TINKER_CONNECT_TIMEOUT", "10")
    with pytest.raises(BackendUnavailable) as err:
        create_training_backend(_cfg(tmp_path, engine.url))
    assert str(err.value) == (
        f"trainer.base_model 'tiny-chat' is not served by the self-hosted Tinker engine at {engine.url}; "
        "choose one of: smollm2-135m"
    )
    assert ("GET", "/api/v1/get_server_capabilities") in [(m, p) for m, p, _, _ in engine.requests]
    assert {key for _, _, key, _ in engine.requests} == {PLACEHOLDER_KEY}
    assert CLOUD_KEY not in json.dumps(engine.requests)


def test_an_engine_that_refuses_is_named_with_where_to_look(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sdk_attach: Any
) -> None:
    recorder = Recorder({})  # up, but not a Tinker-API engine: 404 everywhere
    try:
        monkeypatch.setenv("TINKER_CONNECT_TIMEOUT", "10")
        with pytest.raises(BackendUnavailable) as err:
            create_training_backend(_cfg(tmp_path, recorder.url))
    finally:
        recorder.close()
    message = str(err.value)
    assert message.startswith(f"The self-hosted Tinker engine at {recorder.url} could not list the models it serves: ")
    assert message.endswith("; `mcp-server-rl doctor` shows the engine's state, and the engine's log says why")
    assert "Tinker could not" not in message


def test_self_hosted_needs_an_engine_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    monkeypatch.setenv("TINKER_API_KEY", CLOUD_KEY)
    with pytest.raises(BackendUnavailable, match="trainer.self_hosted is set but no engine URL is"):
        create_training_backend(_cfg(tmp_path, None))


def test_unload_posts_the_model_id(engine: Recorder) -> None:
    assert unload_model(engine.url + "/", "model-1", timeout=5, api_key=PLACEHOLDER_KEY) is True
    assert engine.requests == [("POST", "/api/v1/unload_model", PLACEHOLDER_KEY, {"model_id": "model-1"})]


def test_unload_against_a_closed_port_returns_quickly_without_raising(caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="tinker_atropos.backends.tinker_compat"):
        assert unload_model(url, "model-1", timeout=5) is False
    assert time.monotonic() - start < 2.0
    assert f"could not unload model model-1 from the self-hosted Tinker engine at {url}" in caplog.text


def test_unload_refused_by_the_engine_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    recorder = Recorder({})  # 404: an engine that no longer knows the model
    try:
        assert unload_model(recorder.url, "gone", timeout=5) is False
    finally:
        recorder.close()
    assert "404" in caplog.text


class _SdkTrainingClient:
    """What TinkerTrainingClient reads of the SDK's TrainingClient at the end of a run: model_id."""

    model_id = "model-1"

    def get_tokenizer(self) -> Any:
        raise AssertionError("the SDK's hub lookup was used")


def test_close_unloads_from_a_self_hosted_engine_once(
    engine: Recorder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", CLOUD_KEY)
    monkeypatch.setenv("TINKER_ENGINE_API_KEY", "tml-engine-key")
    client = TinkerTrainingClient(_SdkTrainingClient(), _cfg(tmp_path, engine.url).trainer)
    client.close()
    client.close()
    assert engine.requests == [("POST", "/api/v1/unload_model", "tml-engine-key", {"model_id": "model-1"})]


def test_close_sends_nothing_to_the_cloud(engine: Recorder, tmp_path: Path) -> None:
    client = TinkerTrainingClient(_SdkTrainingClient(), _cfg(tmp_path, engine.url, self_hosted=False).trainer)
    client.close()
    assert engine.requests == []


# --- the tokenizer --------------------------------------------------------------------------


def test_an_offline_models_tokenizer_comes_from_its_folder(tmp_path: Path) -> None:
    client = TinkerTrainingClient(_SdkTrainingClient(), _cfg(tmp_path, "http://127.0.0.1:1").trainer)
    tokenizer = client.get_tokenizer()
    assert tokenizer.name_or_path == str(model_dir("tiny-chat"))
    assert tokenizer.eos_token == "<|im_end|>"
    assert client.get_tokenizer() is tokenizer  # loaded once: the trainer asks every step


def test_prompt_logprobs_get_their_leading_none_back() -> None:
    """SkyRL 0.4 answers compute_logprobs with one value fewer than the prompt's tokens."""
    from tinker_atropos.backends.tinker_compat import one_per_position

    assert one_per_position([-1.0, -2.0], 3) == [None, -1.0, -2.0]
    assert one_per_position([None, -1.0, -2.0], 3) == [None, -1.0, -2.0]  # Tinker's own shape, untouched
