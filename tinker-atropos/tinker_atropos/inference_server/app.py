"""The HTTP API: OpenAI completions/chat, sglang and vllm /generate, vLLM's tokens-in
/inference/v1/generate, /logprobs, /health.

Every request takes the live sampler once (`SamplerHolder.current()`) and uses it to the end.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from tinker_atropos.agent.chat_format import ChatScaffold, openai_tool_calls
from tinker_atropos.agent.tool_calls import parse_tool_calls
from tinker_atropos.inference_server import engine
from tinker_atropos.inference_server.conversations import ConversationCache
from tinker_atropos.inference_server.disconnects import Cancellations, CancelOnDisconnect
from tinker_atropos.inference_server.engine import Generation, SamplerLoop, SampleSpec
from tinker_atropos.inference_server.holder import SamplerHolder, SamplerNotReady
from tinker_atropos.inference_server.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    LogprobsRequest,
    SglangGenerateRequest,
    TokensGenerateRequest,
    VllmGenerateRequest,
)
from tinker_atropos.reply_cap import ReplyCap

DEFAULT_CHAT_MAX_TOKENS = 256


class BadRequest(ValueError):
    """The request is well-formed JSON but asks for something we cannot do (HTTP 400)."""


def _error(status: int, message: str, kind: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind}})


class _Codec:
    """Text <-> tokens with the served model's tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text))

    def decode(self, tokens: list[int]) -> str:
        return self.tok.decode(tokens, skip_special_tokens=True)

    def raw(self, tokens: list[int]) -> str:
        """The tokens' text, special tokens included (a stop token id's text is its stop string)."""
        return self.tok.decode(tokens, skip_special_tokens=False)

    def piece(self, token: int) -> str:
        return self.raw([token])

    def stops(self, stop: str | list[str] | None, stop_token_ids: list[int] | None = None) -> tuple[str, ...] | None:
        return engine.normalize_stop(stop, stop_token_ids, self.raw, self.tok.eos_token)

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        return ChatScaffold(self.tok).prompt_tokens(messages)

    def cut_at_stop(self, gen: Generation, stops: tuple[str, ...]) -> tuple[str, Generation]:
        """OpenAI semantics: the text ends before the first stop string (tokens up to it)."""
        text = self.decode(gen.tokens)
        hits = [i for i in (text.find(s) for s in stops if s) if i >= 0]
        if not hits:
            return text, gen
        cut = min(hits)
        lo, hi = 1, len(gen.tokens)  # the shortest token prefix whose text reaches into the stop
        while lo < hi:
            mid = (lo + hi) // 2
            if len(self.decode(gen.tokens[:mid])) > cut:
                hi = mid
            else:
                lo = mid + 1
        return text[:cut], Generation(gen.tokens[:lo], gen.logprobs[:lo], "stop")


def _string_stops(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    return (stop,) if isinstance(stop, str) else tuple(stop)


def _usage(prompt_len: int, gens: list[Generation]) -> dict[str, int]:
    completion = sum(len(g.tokens) for g in gens)
    return {"prompt_tokens": prompt_len, "completion_tokens": completion, "total_tokens": prompt_len + completion}


def _parse(model: type[BaseModel], body: Any) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise BadRequest(str(exc)) from exc


def build_app(holder: SamplerHolder, model_name: str, tokenizer: Any, cap: ReplyCap | None = None) -> FastAPI:
    """The inference API for `model_name`, always served by `holder`'s newest sampler; `cap`: the
    product's per-turn generation cap (reply_cap.py; None: requests get the tokens they ask for)."""
    codec = _Codec(tokenizer)
    conversations = ConversationCache()  # multi-turn prompts with the tokens this server sampled

    def limit(asked: int) -> int:
        return cap.limit(asked) if cap is not None else asked

    def spec_of(max_tokens: int, req: Any) -> SampleSpec:
        """A request's sampling settings (every request shape names them alike), its stops as strings."""
        stops = codec.stops(req.stop, getattr(req, "stop_token_ids", None))
        return SampleSpec(max_tokens, req.temperature, req.top_p, req.top_k, req.seed, stops)

    loop_box: dict[str, SamplerLoop] = {}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        loop_box["loop"] = SamplerLoop()
        try:
            yield
        finally:
            loop_box.pop("loop").close()

    app = FastAPI(title="tinker-atropos inference", lifespan=lifespan)
    cancellations = Cancellations()
    app.add_middleware(CancelOnDisconnect, cancellations=cancellations)

    async def sample(prompt: list[int], n: int, spec: SampleSpec) -> list[Generation]:
        sampler, _ = holder.current()
        return await engine.sample(loop_box["loop"], sampler, prompt, n, spec)

    async def _bad(_: Request, exc: Exception) -> JSONResponse:
        return _error(400, str(exc), "invalid_request_error")

    for invalid in (BadRequest, ValueError, RequestValidationError):
        app.add_exception_handler(invalid, _bad)

    @app.exception_handler(SamplerNotReady)
    async def _not_ready(_: Request, exc: SamplerNotReady) -> JSONResponse:
        return _error(503, str(exc), "unavailable")

    @app.get("/health")
    async def health() -> JSONResponse:
        if not holder.ready:
            return JSONResponse(status_code=503, content={"status": "loading"})
        sampler, _ = holder.current()
        # the local sampler counts the tokens it decodes as it goes (rl_test_inference's progress)
        # and times its decode steps (an environment's request timeout follows them)
        return JSONResponse(
            {
                "status": "ok",
                "sampler": holder.label,
                "step": holder.steps,
                "weights": holder.weights,
                "generated_tokens": getattr(sampler, "generated_tokens", None),
                "decoding": getattr(sampler, "decoding", None),
                "reply_cap": asdict(cap) if cap is not None else None,
                "cancelled_requests": cancellations.count,
            }
        )

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        entry: dict[str, Any] = {"id": model_name, "object": "model", "created": 0, "owned_by": "tinker-atropos"}
        if cap is not None and cap.context is not None:  # vLLM's field: verifiers' TrainClient reads it
            entry["max_model_len"] = cap.context
        return {"object": "list", "data": [entry]}

    @app.post("/v1/completions")
    async def completions(body: dict[str, Any]) -> dict[str, Any]:
        req: CompletionRequest = _parse(CompletionRequest, body)
        if req.stream or req.echo:
            raise BadRequest("stream and echo are not supported")
        prompts = _completion_prompts(req.prompt, codec)
        stops = _string_stops(req.stop)
        spec = spec_of(limit(req.max_tokens) if req.max_tokens is not None else 16, req)
        results = await asyncio.gather(*(sample(p, req.n, spec) for p in prompts))
        choices, all_gens = [], []
        for gens in results:
            for gen in gens:
                text, gen = codec.cut_at_stop(gen, stops)
                all_gens.append(gen)
                choice: dict[str, Any] = {
                    "index": len(choices),
                    "text": text,
                    "finish_reason": gen.finish_reason,
                    "logprobs": None,
                }
                if req.logprobs is not None:
                    choice["logprobs"] = _completion_logprobs(gen, codec)
                choices.append(choice)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": _usage(sum(len(p) for p in prompts), all_gens),
        }

    @app.post("/v1/chat/completions")
    async def chat_completions(body: dict[str, Any]) -> dict[str, Any]:
        req: ChatCompletionRequest = _parse(ChatCompletionRequest, body)
        if req.stream:
            raise BadRequest("stream is not supported")
        prompt = conversations.prompt_tokens(ChatScaffold(tokenizer, req.tools), req.messages)
        stops = _string_stops(req.stop)
        asked = req.max_completion_tokens or req.max_tokens
        max_tokens = limit(asked) if asked else DEFAULT_CHAT_MAX_TOKENS
        spec = spec_of(max_tokens, req)
        gens = await sample(prompt, req.n, spec)
        choices, kept = [], []
        for i, gen in enumerate(gens):
            text, gen = codec.cut_at_stop(gen, stops)
            kept.append(gen)
            message: dict[str, Any] = {"role": "assistant", "content": text}
            finish = gen.finish_reason
            if req.tools:  # like vLLM's hermes tool parser: well-formed calls become tool_calls
                parsed = parse_tool_calls(text)
                if parsed.calls and not parsed.errors:
                    message = {
                        "role": "assistant",
                        "content": parsed.content or None,
                        "tool_calls": openai_tool_calls(parsed.calls),
                    }
                    finish = "tool_calls"
            choice: dict[str, Any] = {
                "index": i,
                "finish_reason": finish,
                "message": message,
                "logprobs": _chat_logprobs(gen, codec) if req.logprobs else None,
            }
            choices.append({**choice, "token_ids": gen.tokens} if req.return_token_ids else choice)
            conversations.remember(req.messages, message, req.tools, prompt, gen.tokens)
        out = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": _usage(len(prompt), kept),
        }
        return {**out, "prompt_token_ids": prompt} if req.return_token_ids else out

    @app.post("/generate", response_model=None)
    async def generate(body: dict[str, Any]) -> dict[str, Any] | list[dict[str, Any]]:
        if "sampling_params" in body or "input_ids" in body or "text" in body:
            return await _sglang_generate(_parse(SglangGenerateRequest, body))
        if "prompt" in body:
            return await _vllm_generate(_parse(VllmGenerateRequest, body))
        raise BadRequest("expected sglang (input_ids/text + sampling_params) or vllm (prompt) fields")

    async def _sglang_generate(req: SglangGenerateRequest) -> dict[str, Any] | list[dict[str, Any]]:
        if req.stream:
            raise BadRequest("stream is not supported")
        if req.input_ids is not None:
            batch = isinstance(req.input_ids[0], list) if req.input_ids else False
            prompts = [list(p) for p in req.input_ids] if batch else [list(req.input_ids)]
        elif req.text is not None:
            batch = isinstance(req.text, list)
            prompts = [codec.encode(t) for t in (req.text if batch else [req.text])]
        else:
            raise BadRequest("input_ids or text is required")
        sp = req.sampling_params
        spec = spec_of(limit(sp.max_new_tokens), sp)
        results = await asyncio.gather(*(sample(p, sp.n, spec) for p in prompts))
        outs = [
            _sglang_output(prompt, gen, codec, req.return_logprob)
            for prompt, gens in zip(prompts, results)
            for gen in gens
        ]
        return outs if batch or sp.n > 1 else outs[0]

    async def _vllm_generate(req: VllmGenerateRequest) -> dict[str, Any]:
        if req.stream:
            raise BadRequest("stream is not supported")
        if isinstance(req.prompt, str):
            prompt, prompt_text = codec.encode(req.prompt), req.prompt
        else:
            prompt = list(req.prompt.prompt_token_ids)
            prompt_text = codec.decode(prompt)
        spec = spec_of(limit(req.max_tokens), req)
        sampler, _ = holder.current()
        loop = loop_box["loop"]
        gens_task = engine.sample(loop, sampler, prompt, req.n, spec)
        if req.prompt_logprobs is not None:
            gens, prompt_lps = await asyncio.gather(gens_task, engine.prompt_logprobs(loop, sampler, prompt))
        else:
            gens, prompt_lps = await gens_task, None
        out: dict[str, Any] = {
            "text": [codec.decode(g.tokens) for g in gens],
            "prompt": prompt_text,
            "finish_reasons": [g.finish_reason for g in gens],
            "prompt_token_ids": prompt,
            "token_ids": [g.tokens for g in gens],
        }
        if req.logprobs is not None:
            out["logprobs"] = [[[{str(t): lp}] for t, lp in zip(g.tokens, g.logprobs)] for g in gens]
        if prompt_lps is not None:
            out["prompt_logprobs"] = [None if lp is None else {str(t): lp} for t, lp in zip(prompt, prompt_lps)]
        return out

    @app.post("/inference/v1/generate")
    async def tokens_generate(body: dict[str, Any]) -> dict[str, Any]:
        """Token ids in, token ids out (the stop token kept, as sampled): the client renders and
        parses the conversation itself, so every id it trains on is one this server sampled."""
        req: TokensGenerateRequest = _parse(TokensGenerateRequest, body)
        sp = req.sampling_params
        spec = spec_of(limit(sp.max_tokens) if sp.max_tokens is not None else DEFAULT_CHAT_MAX_TOKENS, sp)
        gens = await sample(list(req.token_ids), sp.n, spec)
        choices = [
            {
                "index": i,
                "token_ids": gen.tokens,
                "logprobs": None if sp.logprobs is None else _token_id_logprobs(gen),
                "finish_reason": gen.finish_reason,
            }
            for i, gen in enumerate(gens)
        ]
        return {
            "request_id": f"gen-{uuid.uuid4().hex}",
            "prompt_token_ids": list(req.token_ids),
            "choices": choices,
            "usage": _usage(len(req.token_ids), gens),
        }

    @app.post("/logprobs")
    async def logprobs(body: dict[str, Any]) -> dict[str, Any]:
        req: LogprobsRequest = _parse(LogprobsRequest, body)
        if req.input_ids is not None:
            prompt = list(req.input_ids)
        elif req.messages is not None:
            prompt = codec.chat_prompt(req.messages)
        elif req.prompt is not None:
            prompt = codec.encode(req.prompt)
        else:
            raise BadRequest("input_ids, prompt or messages is required")
        sampler, version = holder.current()
        lps = await engine.prompt_logprobs(loop_box["loop"], sampler, prompt)
        return {"model": model_name, "prompt_tokens": prompt, "logprobs": lps, "sampler_version": version}

    return app


def _completion_prompts(prompt: str | list[str] | list[int] | list[list[int]], codec: _Codec) -> list[list[int]]:
    if isinstance(prompt, str):
        return [codec.encode(prompt)]
    if not prompt:
        raise BadRequest("prompt is empty")
    if isinstance(prompt[0], str):
        return [codec.encode(p) for p in prompt]  # type: ignore[arg-type]
    if isinstance(prompt[0], int):
        return [list(prompt)]  # type: ignore[arg-type]
    return [list(p) for p in prompt]  # type: ignore[arg-type]


def _completion_logprobs(gen: Generation, codec: _Codec) -> dict[str, Any]:
    pieces = [codec.piece(t) for t in gen.tokens]
    offsets, pos = [], 0
    for p in pieces:
        offsets.append(pos)
        pos += len(p)
    return {
        "tokens": pieces,
        "token_logprobs": gen.logprobs,
        "top_logprobs": [{p: lp} for p, lp in zip(pieces, gen.logprobs)],
        "text_offset": offsets,
    }


def _chat_logprobs(gen: Generation, codec: _Codec) -> dict[str, Any]:
    content = []
    for t, lp in zip(gen.tokens, gen.logprobs):
        piece = codec.piece(t)
        entry = {"token": piece, "logprob": lp, "bytes": list(piece.encode("utf-8"))}
        content.append({**entry, "top_logprobs": [entry]})
    return {"content": content}


def _token_id_logprobs(gen: Generation) -> dict[str, Any]:
    """vLLM's `return_tokens_as_token_ids` form: one entry per sampled token, named by its id."""
    return {"content": [{"token": f"token_id:{t}", "logprob": lp} for t, lp in zip(gen.tokens, gen.logprobs)]}


def _sglang_output(prompt: list[int], gen: Generation, codec: _Codec, with_logprobs: bool) -> dict[str, Any]:
    finish: dict[str, Any] = {"type": gen.finish_reason}
    if gen.finish_reason == "length":
        finish["length"] = len(gen.tokens)
    meta: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "finish_reason": finish,
        "prompt_tokens": len(prompt),
        "completion_tokens": len(gen.tokens),
    }
    if with_logprobs:
        meta["output_token_logprobs"] = [[lp, t, None] for t, lp in zip(gen.tokens, gen.logprobs)]
    return {"text": codec.decode(gen.tokens), "output_ids": gen.tokens, "meta_info": meta}
