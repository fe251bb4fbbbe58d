"""A `SamplingBackend` served by vLLM: a prompt's token ids in, sampled token ids and their logprobs out
(`/v1/completions` with `return_token_ids` and `logprobs: 0`; streamed, each token told as it comes,
for the inference server's streamed replies), a prompt's own logprobs by `prompt_logprobs`.
The logprobs are the model's own (vLLM's default raw logprobs: temperature 1), as the product's
importance ratios need.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import numpy as np
from tinker import types

from tinker_atropos.vllm_server.process import VllmError

REQUEST_TIMEOUT = httpx.Timeout(None, connect=10.0)


class VllmClient:
    """vLLM's HTTP API at `url`, one connection pool per event loop (the inference server samples on a
    loop of its own, the trainer loads adapters on another)."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self._clients: dict[asyncio.AbstractEventLoop, httpx.AsyncClient] = {}

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(loop)
        if client is None:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            client = self._clients[loop] = httpx.AsyncClient(base_url=self.url, timeout=REQUEST_TIMEOUT, limits=limits)
        return client

    async def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        return await self._request("POST", path, body)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> httpx.Response:
        try:
            return await self._client().request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise VllmError(f"vLLM's server at {self.url} did not answer {path}: {exc!r}") from exc

    async def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.post("/v1/completions", body)
        _completed(response)
        data: dict[str, Any] = response.json()
        return data

    async def completion_chunks(self, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """A streamed completion's choices, chunk by chunk, as vLLM sends them."""
        try:
            async with self._client().stream("POST", "/v1/completions", json={**body, "stream": True}) as response:
                if response.status_code != 200:
                    await response.aread()
                    _completed(response)
                async for line in response.aiter_lines():
                    data = line.removeprefix("data: ").strip() if line.startswith("data: ") else ""
                    if data and data != "[DONE]":
                        for choice in json.loads(data).get("choices") or []:
                            yield choice
        except httpx.HTTPError as exc:
            raise VllmError(f"vLLM's server at {self.url} did not answer /v1/completions: {exc!r}") from exc

    async def models(self) -> list[dict[str, Any]]:
        response = await self._request("GET", "/v1/models")
        if response.status_code != 200:
            raise VllmError(f"vLLM's server at {self.url} answered {response.status_code} to /v1/models")
        return list(response.json().get("data", []))

    async def aclose(self) -> None:
        """Close this loop's pool; another loop's (ended by now) is dropped with its sockets."""
        client = self._clients.pop(asyncio.get_running_loop(), None)
        self._clients.clear()
        if client is not None:
            await client.aclose()


def _completed(response: httpx.Response) -> None:
    """A completion's answer was not refused: a 400 is the caller's (the request cannot be served)."""
    if response.status_code == 400:
        raise ValueError(_message(response))
    if response.status_code != 200:
        raise VllmError(f"vLLM's server answered {response.status_code} to a completion: {_message(response)}")


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    error = body.get("error", body) if isinstance(body, dict) else body
    return str(error.get("message", error) if isinstance(error, dict) else error)[:500]


class VllmSampler:
    """The weights vLLM serves under `model` (the base model's name, or a loaded adapter's)."""

    streams_tokens = True  # sample_async takes `on_token` (the inference server's streamed replies)

    def __init__(self, client: VllmClient, model: str, max_model_len: int, path: str | None = None) -> None:
        self.client = client
        self.model = model
        self.max_model_len = max_model_len
        self.path = path  # the adapter folder (None: the base model)

    async def sample_async(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        on_token: Callable[[int, int, float], None] | None = None,
    ) -> types.SampleResponse:
        ids = prompt.to_ints()
        if not ids:
            raise ValueError("cannot sample from an empty prompt")
        room = self.max_model_len - len(ids)
        if room <= 0:
            raise ValueError(f"prompt of {len(ids)} tokens fills the context ({self.max_model_len})")
        wanted = sampling_params.max_tokens
        max_tokens = room if wanted is None else max(0, min(wanted, room))
        if max_tokens == 0:
            return _response([([], [], "length")] * num_samples)
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": ids,
            "n": num_samples,
            "max_tokens": max_tokens,
            "temperature": sampling_params.temperature,
            "top_p": sampling_params.top_p,
            "top_k": sampling_params.top_k,
            "logprobs": 0,
            "return_token_ids": True,
            "skip_special_tokens": False,
        }
        if sampling_params.seed is not None:
            body["seed"] = sampling_params.seed
        stop = sampling_params.stop
        if stop:
            key = "stop_token_ids" if all(isinstance(s, int) for s in stop) else "stop"
            body[key] = list(stop)
        if on_token is not None:
            return _response(await self._streamed(body, num_samples, on_token))
        data = await self.client.completion(body)
        return _response([_sequence(choice) for choice in sorted(data["choices"], key=lambda c: c["index"])])

    async def _streamed(
        self, body: dict[str, Any], n: int, on_token: Callable[[int, int, float], None]
    ) -> list[tuple[list[int], list[float], str]]:
        """The samples of a streamed completion, each token told to `on_token` as its chunk comes (the
        tokens named by id: `return_tokens_as_token_ids`)."""
        sequences: list[tuple[list[int], list[float], str]] = [([], [], "stop") for _ in range(n)]
        async for choice in self.client.completion_chunks({**body, "return_tokens_as_token_ids": True}):
            index = int(choice["index"])
            tokens, logprobs, _ = sequences[index]
            for token, logprob in zip(*_chunk_tokens(choice)):
                tokens.append(token)
                logprobs.append(logprob)
                on_token(index, token, logprob)
            if choice.get("finish_reason"):
                sequences[index] = (tokens, logprobs, "length" if choice["finish_reason"] == "length" else "stop")
        return sequences

    async def compute_logprobs_async(self, prompt: types.ModelInput, from_position: int = 0) -> list[float | None]:
        ids = prompt.to_ints()
        if not ids:
            raise ValueError("the prompt is empty")
        body = {"model": self.model, "prompt": ids, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 1.0}
        data = await self.client.completion(body)
        scored = data["choices"][0]["prompt_logprobs"]
        out: list[float | None] = [None]
        for token, entry in zip(ids[1:], scored[1:]):
            out.append(float(entry[str(token)]["logprob"]) if entry and str(token) in entry else None)
        return out


def _sequence(choice: dict[str, Any]) -> tuple[list[int], list[float], str]:
    tokens = [int(t) for t in choice.get("token_ids") or []]
    logprobs = [float(v) for v in (choice.get("logprobs") or {}).get("token_logprobs") or []]
    if len(logprobs) != len(tokens):
        raise VllmError(f"vLLM returned {len(tokens)} tokens with {len(logprobs)} logprobs")
    return tokens, logprobs, "length" if choice.get("finish_reason") == "length" else "stop"


def _chunk_tokens(choice: dict[str, Any]) -> tuple[list[int], list[float]]:
    """A streamed chunk's token ids (`token_ids`, else its logprobs' `token_id:N` names) and logprobs."""
    lps = choice.get("logprobs") or {}
    logprobs = [float(v) for v in lps.get("token_logprobs") or []]
    ids = choice.get("token_ids")
    if ids is None:
        ids = [int(str(name).removeprefix("token_id:")) for name in lps.get("tokens") or []]
    if len(ids) != len(logprobs):
        raise VllmError(f"vLLM streamed {len(ids)} tokens with {len(logprobs)} logprobs")
    return [int(t) for t in ids], logprobs


def _response(sequences: list[tuple[list[int], list[float], str]]) -> types.SampleResponse:
    return types.SampleResponse(
        sequences=[
            types.SampledSequence(
                stop_reason=reason,
                sequence_id=uuid.uuid4().hex,
                tokens_np=np.asarray(tokens, dtype=np.int32),
                logprobs_np=np.asarray(logprobs, dtype=np.float32),
            )
            for tokens, logprobs, reason in sequences
        ]
    )
