"""What an environment's model requests do: timeouts, client retries, replies cut at their token
cap, tokens; and the replies of the rollout in progress (shown when the environment discards it).

atroposlib tries a request that times out three times (the openai client retries each try twice
more) and logs nothing a person can act on; a reply that runs to its token cap looks like any
other. `install` wraps every atroposlib API server's request methods, so each try is counted
into env_health.json (docs/run-files.md) as it starts and ends.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Protocol

from tinker_atropos.env_process.timeout_fitter import TimeoutFitter

WRAPPED = ("_chat_completion_wrapper", "_completion_wrapper", "_tokens_and_logprobs_completion_wrapper")
OPENAI_RETRY = "Retrying request"  # the openai client's INFO line before it sends a request again
OPENAI_CAUSE = "Encountered"  # its DEBUG line just before: a timeout, an exception, or an HTTP status
OPENAI_LOGGER = "openai._base_client"  # where both are logged
REPLIES_KEPT = 8  # replies of one rollout kept for a discarded group's samples

_replies: ContextVar[list[str] | None] = ContextVar("rollout_replies", default=None)
_requesting: ContextVar[bool] = ContextVar("in_model_request", default=False)  # inside a counted request


@dataclass(frozen=True)
class Reply:
    """One reply as a request returned it."""

    text: str
    at_cap: bool  # finish_reason "length": its token cap or the model's context cut it


@dataclass(frozen=True)
class Answered:
    """What one request try returned: its replies, their tokens, the prompt's, the cap asked for."""

    replies: list[Reply]
    reply_tokens: int | None
    prompt_tokens: int | None
    asked: int | None  # the max_tokens the request asked for (None: the server's default)


class RequestRecorder(Protocol):
    """Where the counts go (health.HealthRecorder)."""

    def client_timeout(
        self, seconds: float | None, basis: str | None = None, seconds_per_token: float | None = None
    ) -> None: ...
    def client_retried(self, cause: str) -> None: ...
    def request_started(self, asked: int | None) -> int: ...
    def request_failed(self, ticket: int, *, timed_out: bool) -> None: ...
    def request_answered(self, ticket: int, reply: Answered) -> None: ...


@contextmanager
def collecting_replies() -> Iterator[list[str]]:
    """The replies generated inside this block, its tasks included, gathered into the list yielded."""
    replies: list[str] = []
    token = _replies.set(replies)
    try:
        yield replies
    finally:
        _replies.reset(token)


def answered(result: Any, kwargs: dict[str, Any], decode: Callable[[list[int]], str] | None) -> Answered:
    """An atroposlib request method's result read: a ChatCompletion, a Completion, or the
    (prompt tokens, outputs, logprobs, finish reasons) of `tokens_and_logprobs_completion`."""
    asked = asked_tokens(kwargs)
    if isinstance(result, tuple):
        prompt, outputs, _, finishes = result
        replies = [
            Reply(decode(list(out)) if decode else "", _reason(finish) == "length")
            for out, finish in zip(outputs, finishes)
        ]
        return Answered(replies, sum(len(out) for out in outputs), len(prompt), asked)
    replies = [Reply(_choice_text(c), getattr(c, "finish_reason", None) == "length") for c in result.choices]
    usage = getattr(result, "usage", None)
    return Answered(
        replies,
        getattr(usage, "completion_tokens", None),
        getattr(usage, "prompt_tokens", None),
        asked,
    )


def asked_tokens(kwargs: dict[str, Any]) -> int | None:
    """The most tokens a request asks its reply to have (None: the server's default)."""
    asked = kwargs.get("max_tokens") or kwargs.get("max_completion_tokens") or kwargs.get("max_new_tokens")
    return asked if isinstance(asked, int) else None


def _reason(finish: Any) -> str | None:
    """sglang gives {"type": "length", ...}, vllm and OpenAI a string."""
    return finish.get("type") if isinstance(finish, dict) else finish


def _choice_text(choice: Any) -> str:
    message = getattr(choice, "message", None)
    text = getattr(message, "content", None) if message is not None else getattr(choice, "text", None)
    return text or ""


def timed_out(exc: BaseException) -> bool:
    """The client gave up waiting (openai's APITimeoutError, aiohttp's and asyncio's timeouts)."""
    return isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__


class _RetryLines(logging.Filter):
    """Counts the openai client's retries of model requests, each by its cause, from its log lines (it
    reports them nowhere else): the debug line naming the cause comes just before the retry line, with
    no await between them. The retries of atroposlib's server checks (a request a second, in a task of
    their own) are not model requests and are not counted. The debug lines are read here, then dropped
    unless the client's logger was already at DEBUG."""

    def __init__(self, recorder: RequestRecorder, shown_from: int) -> None:
        super().__init__()
        self.recorder = recorder
        self.shown_from = shown_from
        self.cause = "unknown"

    def filter(self, record: logging.LogRecord) -> bool:
        msg = str(record.msg)
        if msg.startswith(OPENAI_CAUSE):
            self.cause = retry_cause(msg, record.args)
        elif msg.startswith(OPENAI_RETRY):
            if _requesting.get():
                self.recorder.client_retried(self.cause)
            self.cause = "unknown"
        return record.levelno >= self.shown_from


def retry_cause(msg: str, args: Any) -> str:
    """`timeout`, `connection ERROR` or `status N`, from the client's "Encountered ..." line."""
    arg = args[0] if isinstance(args, tuple) and args else None
    if "timeout" in msg:
        return "timeout"
    if "status" in msg:
        return f"status {arg}"
    return f"connection {arg}"


def counted_request(
    method: Callable[..., Awaitable[Any]], server: Any, recorder: RequestRecorder, fitter: TimeoutFitter | None
) -> Callable[..., Any]:
    """`method`, each call counted into `recorder` (and its timeout fitted by `fitter`)."""
    decode = getattr(getattr(server, "tokenizer", None), "decode", None)

    async def request(**kwargs: Any) -> Any:
        asked = asked_tokens(kwargs)
        if fitter is not None:  # each try gets the timeout the server's latest speed gives
            fitted = await fitter.before_request(server, kwargs, asked)
            recorder.client_timeout(fitted.timeout_s, fitted.basis, fitted.step_s)
        ticket = recorder.request_started(asked)
        inside = _requesting.set(True)
        try:
            result = await method(**kwargs)
        except BaseException as exc:
            recorder.request_failed(ticket, timed_out=timed_out(exc))
            raise
        finally:
            _requesting.reset(inside)
        collected = _replies.get()
        wanted = collected is not None and len(collected) < REPLIES_KEPT  # decode tokens only for samples
        try:
            reply = answered(result, kwargs, decode if wanted else None)
        except (AttributeError, TypeError, ValueError):  # a result of a shape not known here: counted, not read
            reply = Answered([], None, None, asked_tokens(kwargs))
        recorder.request_answered(ticket, reply)
        if collected is not None and wanted:
            collected.extend(r.text for r in reply.replies[: REPLIES_KEPT - len(collected)])
        return result

    return request


def install(recorder: RequestRecorder, fitter: TimeoutFitter | None = None) -> None:
    """Count every request of every API server created after this call (and the openai client's retries);
    with `fitter`, each request's timeout is derived (`request_timeouts`)."""
    from atroposlib.envs.server_handling.server_baseline import APIServer

    original_init = APIServer.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        recorder.client_timeout(getattr(self.config, "timeout", None))
        for name in WRAPPED:
            setattr(self, name, counted_request(getattr(self, name), self, recorder, fitter))

    APIServer.__init__ = __init__  # type: ignore[method-assign]
    count_client_retries(recorder)


def count_client_retries(recorder: RequestRecorder) -> logging.Filter:
    """Count the openai client's retries into `recorder`, by cause, from now on (the filter returned)."""
    client_log = logging.getLogger(OPENAI_LOGGER)
    retries = _RetryLines(recorder, client_log.getEffectiveLevel())
    client_log.setLevel(logging.DEBUG)  # so that the cause's line is made at all
    client_log.addFilter(retries)
    return retries
