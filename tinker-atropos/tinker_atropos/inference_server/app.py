"""The HTTP API: OpenAI completions/chat, sglang and vllm /generate, vLLM's tokens-in
/inference/v1/generate, /logprobs, /health; /episodes/{key}: the calls made with an episode's api key
(episode_log.py).

Every request takes the live sampler once (`SamplerHolder.current()`) and uses it to the end.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ValidationError

from tinker_atropos.agent.chat_format import ChatScaffold
from tinker_atropos.inference_server import engine
from tinker_atropos.inference_server.conversations import ConversationCache
from tinker_atropos.inference_server.disconnects import Cancellations, CancelOnDisconnect
from tinker_atropos.inference_server.engine import Generation, SamplerLoop, SampleSpec
from tinker_atropos.inference_server.episode_log import EpisodeLog, Weights, episode_key, sampled, watched
from tinker_atropos.inference_server.holder import SamplerHolder, SamplerNotReady
from tinker_atropos.inference_server.replies import ChatReply, chat_reply, cut_tokens, stop_cut
from tinker_atropos.inference_server.schemas import (
    ChatCompletionRequest,
    CompletionRequest,
    LogprobsRequest,
    SglangGenerateRequest,
    TokensGenerateRequest,
    VllmGenerateRequest,
)
from tinker_atropos.inference_server.streaming import StreamHead, chat_stream, completion_stream
from tinker_atropos.reply_cap import ReplyCap

DEFAULT_CHAT_MAX_TOKENS = 256
CLAMPED_HEADER = "x-max-tokens-clamped"  # "ASKED -> GRANTED (why)": a reply given fewer tokens than asked
log = logging.getLogger("tinker_atropos.inference_server")


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
        cut = stop_cut(text, stops)
        if cut is None:
            return text, gen
        kept = cut_tokens(gen.tokens, cut, self.decode)
        return text[:cut], Generation(gen.tokens[:kept], gen.logprobs[:kept], "stop")


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
        raise BadRequest(_named(exc)) from exc


def _named(exc: ValidationError) -> str:
    """Each bad field by its name, what is wrong and the value sent (fields we do not know are ignored)."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "body"
        sent = "" if err["type"] == "missing" else f" (got {str(err.get('input'))[:80]!r})"
        problems.append(f"{where}: {err['msg']}{sent}")
    return "invalid request: " + "; ".join(problems)


def build_app(
    holder: SamplerHolder,
    model_name: str,
    tokenizer: Any,
    cap: ReplyCap | None = None,
    *,
    log_requests: bool = False,
    episodes: EpisodeLog | None = None,
) -> FastAPI:
    """The inference API for `model_name`, always served by `holder`'s newest sampler; `cap`: the
    product's per-turn generation cap (reply_cap.py; None: requests get the tokens they ask for);
    `log_requests`: a line per OpenAI request naming the weights that served it (a served model's log);
    `episodes`: where episode keys' calls are kept (default: a log of the default bounds)."""
    codec = _Codec(tokenizer)
    conversations = ConversationCache()  # multi-turn prompts with the tokens this server sampled
    episodes = episodes if episodes is not None else EpisodeLog()  # each episode key's calls (episode_log.py)

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
                "episodes": episodes.stats(),
            }
        )

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        entry: dict[str, Any] = {"id": model_name, "object": "model", "created": 0, "owned_by": "tinker-atropos"}
        if cap is not None and cap.context is not None:  # vLLM's field: verifiers' TrainClient reads it
            entry["max_model_len"] = cap.context
        return {"object": "list", "data": [entry]}

    def context_of(sampler: Any) -> int | None:
        """The served model's context in tokens (the local sampler's, vLLM's, else the cap's)."""
        found = getattr(sampler, "max_positions", None) or getattr(sampler, "max_model_len", None)
        return int(found) if found else (cap.context if cap is not None else None)

    def reply_budget(asked: int | None, default: int, prompt_len: int, sampler: Any) -> tuple[int, dict[str, str]]:
        """The tokens a reply may take: what was asked, within the reply cap and what the context leaves
        after the prompt (Hermes asks 65536 of an 8192-token model); a header says when it was clamped."""
        tokens = limit(asked if asked is not None else default)
        context = context_of(sampler)
        if context is not None:
            if prompt_len >= context:
                raise BadRequest(
                    f"the prompt ({prompt_len} tokens) fills the model's context ({context} tokens): "
                    "send a shorter conversation or fewer tools"
                )
            tokens = min(tokens, context - prompt_len)
        if asked is None or tokens >= asked:
            return tokens, {}
        why = f"context {context} tokens, prompt {prompt_len}" if context is not None else "no context known"
        if cap is not None and cap.context is not None and asked > cap.context:
            why += f", reply cap {cap.max_reply_tokens}"
        return tokens, {CLAMPED_HEADER: f"{asked} -> {tokens} ({why})"}

    def served(endpoint: str, sampler: Any, prompt_len: int, kept: list[Generation]) -> None:
        if log_requests:
            by = getattr(sampler, "path", None) or "the base model"
            completion = sum(len(g.tokens) for g in kept)
            log.info("%s: %d prompt + %d completion tokens, served by %s", endpoint, prompt_len, completion, by)

    def weights_of(sampler: Any, version: int) -> Weights:
        return Weights(version, holder.label, getattr(sampler, "path", None))

    @app.get("/episodes/{key}")
    async def episode(key: str) -> dict[str, Any]:
        """An episode's calls (episode_log.py), for its environment to train on."""
        return episodes.answer(key)

    @app.delete("/episodes/{key}")
    async def drop_episode(key: str) -> dict[str, Any]:
        return {"key": key, "dropped": episodes.drop(key)}

    def streamed(chunks: AsyncIterator[str], headers: dict[str, str]) -> StreamingResponse:
        headers = {"cache-control": "no-cache", **headers}
        return StreamingResponse(chunks, media_type="text/event-stream", headers=headers)

    def include_usage(req: CompletionRequest | ChatCompletionRequest) -> bool:
        return bool((req.stream_options or {}).get("include_usage"))

    @app.post("/v1/completions", response_model=None)
    async def completions(body: dict[str, Any], request: Request) -> JSONResponse | StreamingResponse:
        req: CompletionRequest = _parse(CompletionRequest, body)
        key = episode_key(request.headers.get("authorization"))
        if req.echo:
            raise BadRequest("echo is not supported")
        prompts = _completion_prompts(req.prompt, codec)
        if req.stream and len(prompts) > 1:
            raise BadRequest(f"stream takes one prompt, got {len(prompts)}: send one request per prompt")
        sampler, version = holder.current()
        stops = _string_stops(req.stop)
        max_tokens, headers = reply_budget(req.max_tokens, 16, max(len(p) for p in prompts), sampler)
        spec = spec_of(max_tokens, req)
        prompt_len = sum(len(p) for p in prompts)

        recorder = episodes.recorder(key, "completions", prompts, req.n, weights_of(sampler, version), req.stream)

        def finish(gens: list[Generation]) -> tuple[list[Generation], list[str]]:
            cut = [codec.cut_at_stop(gen, stops) for gen in gens]
            kept = [gen for _, gen in cut]
            if recorder is not None:
                recorder.finished(gens, kept, [gen.finish_reason for gen in kept])
            served("completion (streamed)" if req.stream else "completion", sampler, prompt_len, kept)
            return kept, [text for text, _ in cut]

        if req.stream:
            events = watched(recorder, engine.sample_streamed(loop_box["loop"], sampler, prompts[0], req.n, spec))
            chunks = completion_stream(
                events,
                StreamHead(f"cmpl-{uuid.uuid4().hex}", model_name),
                n=req.n,
                decode=codec.decode,
                stops=stops,
                finish=finish,
                logprobs=None if req.logprobs is None else (lambda t, lp, at: _completion_logprobs(t, lp, codec, at)),
                usage=(lambda kept: _usage(prompt_len, kept)) if include_usage(req) else None,
            )
            return streamed(chunks, headers)
        work = asyncio.gather(*(engine.sample(loop_box["loop"], sampler, p, req.n, spec) for p in prompts))
        results = await sampled(recorder, work)
        kept, texts = finish([gen for gens in results for gen in gens])
        choices = [
            {
                "index": i,
                "text": text,
                "finish_reason": gen.finish_reason,
                "logprobs": _completion_logprobs(gen.tokens, gen.logprobs, codec) if req.logprobs is not None else None,
            }
            for i, (text, gen) in enumerate(zip(texts, kept))
        ]
        out = {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": _usage(prompt_len, kept),
        }
        return JSONResponse(out, headers=headers)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: dict[str, Any], request: Request) -> JSONResponse | StreamingResponse:
        req: ChatCompletionRequest = _parse(ChatCompletionRequest, body)
        key = episode_key(request.headers.get("authorization"))
        prompt = conversations.prompt_tokens(ChatScaffold(tokenizer, req.tools), req.messages)
        sampler, version = holder.current()
        stops = _string_stops(req.stop)
        asked = req.max_completion_tokens or req.max_tokens
        max_tokens, headers = reply_budget(asked, DEFAULT_CHAT_MAX_TOKENS, len(prompt), sampler)
        spec = spec_of(max_tokens, req)
        parse_tools = bool(req.tools) and req.tool_choice != "none"
        recorder = episodes.recorder(key, "chat", [prompt], req.n, weights_of(sampler, version), req.stream)

        def finish(gens: list[Generation]) -> tuple[list[Generation], list[ChatReply]]:
            kept, replies = [], []
            for gen in gens:
                text, returned = codec.cut_at_stop(gen, stops)
                reply = chat_reply(text, returned.finish_reason, parse_tools)
                kept.append(returned)
                replies.append(reply)
                conversations.remember(req.messages, reply.message(), req.tools, prompt, returned.tokens)
            if recorder is not None:
                recorder.finished(gens, kept, [reply.finish_reason for reply in replies])
            served("chat completion (streamed)" if req.stream else "chat completion", sampler, len(prompt), kept)
            return kept, replies

        if req.stream:
            events = watched(recorder, engine.sample_streamed(loop_box["loop"], sampler, prompt, req.n, spec))
            chunks = chat_stream(
                events,
                StreamHead(f"chatcmpl-{uuid.uuid4().hex}", model_name),
                n=req.n,
                decode=codec.decode,
                stops=stops,
                parse_tools=parse_tools,
                finish=finish,
                logprobs=(lambda t, lp: _chat_logprobs(t, lp, codec)) if req.logprobs else None,
                usage=(lambda kept: _usage(len(prompt), kept)) if include_usage(req) else None,
            )
            return streamed(chunks, headers)
        kept, replies = finish(await sampled(recorder, engine.sample(loop_box["loop"], sampler, prompt, req.n, spec)))
        choices = []
        for i, (gen, reply) in enumerate(zip(kept, replies)):
            choice: dict[str, Any] = {
                "index": i,
                "finish_reason": reply.finish_reason,
                "message": reply.message(),
                "logprobs": _chat_logprobs(gen.tokens, gen.logprobs, codec) if req.logprobs else None,
            }
            choices.append({**choice, "token_ids": gen.tokens} if req.return_token_ids else choice)
        out = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": _usage(len(prompt), kept),
        }
        return JSONResponse({**out, "prompt_token_ids": prompt} if req.return_token_ids else out, headers=headers)

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


def _completion_logprobs(tokens: list[int], logprobs: list[float], codec: _Codec, offset: int = 0) -> dict[str, Any]:
    """`tokens`' logprobs in the completions form; `offset`: where their text starts in the reply."""
    pieces = [codec.piece(t) for t in tokens]
    offsets, pos = [], offset
    for p in pieces:
        offsets.append(pos)
        pos += len(p)
    return {
        "tokens": pieces,
        "token_logprobs": logprobs,
        "top_logprobs": [{p: lp} for p, lp in zip(pieces, logprobs)],
        "text_offset": offsets,
    }


def _chat_logprobs(tokens: list[int], logprobs: list[float], codec: _Codec) -> dict[str, Any]:
    content = []
    for t, lp in zip(tokens, logprobs):
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
