"""What an environment process reports about its rollouts: scored groups, discarded groups, the
latest exception, and its model requests (`model_requests`).

atroposlib catches an exception from `collect_trajectories`, logs one line without its type or
where it was raised, and tries the next item, forever: a run whose every rollout raises sits at
`running` with the trainer waiting for a batch. A rollout that returns no group (an environment
that skips groups whose scores are all equal, as Atropos' own do) only gets "Failed to process
group, retrying...", and a group with a sequence past the trainer's length only "Token length is too
long in a group, skipping...". The launcher installs this recorder, which wraps each environment's
`collect_trajectories` and keeps `env_health.json` (docs/run-files.md) current, so the server can
show the exception or the discarded groups (their replies and scores) within seconds and fail a
run that only raises or discards.
"""

from __future__ import annotations

import json
import os
import sysconfig
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tinker_atropos.env_process import model_requests
from tinker_atropos.env_process.model_requests import Answered, collecting_replies
from tinker_atropos.env_process.timeout_fitter import TimeoutFitter
from tinker_atropos.item_draw.ledger import ItemLedger, write_items_file
from tinker_atropos.request_timeouts import Policy
from tinker_atropos.run_files import RunFiles, atomic_write_text

_LIBRARY_DIRS = tuple({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["stdlib"]})
COUNTED_WINDOW = 2  # an environment drawing its own items: the ledger's window, as the product's default
REPLY_CHARS = 400  # a discarded group's sample reply is cut here
SCORES_KEPT = 64  # a discarded group's scores: at most this many of the latest
ITEM_KEY_CHARS = 2000  # an item counted by its repr: cut here


@dataclass
class Requests:
    """The model requests' tries so far (each try of a request atroposlib retries counts)."""

    sent: int = 0
    answered: int = 0
    timeouts: int = 0  # tries that outlived the client's timeout
    failed: int = 0  # tries that raised something else
    client_retries: int = 0  # requests the openai client sent again (after a timeout or a server error)
    client_retry_causes: dict[str, int] = field(default_factory=dict)  # timeout, connection ERROR, status N
    client_timeout_s: float | None = None
    client_timeout_basis: str | None = None  # how the timeout was derived (request_timeouts.py)
    seconds_per_token: float | None = None  # a reply token's time at the rows the run schedules (measured)
    max_asked: int | None = None  # the most tokens a request asked for (max_tokens)
    in_flight: int = 0
    oldest_in_flight_at: float | None = None
    last_timeout_at: float | None = None
    replies: int = 0
    replies_at_cap: int = 0  # finish_reason "length"
    reply_tokens: int = 0  # of answered tries whose server counted them
    last_at_cap: dict[str, Any] | None = None  # asked, prompt_tokens, reply_tokens (per reply), at


@dataclass
class Health:
    groups: int = 0
    errors: int = 0
    last_group_at: float | None = None
    last_error: dict[str, Any] | None = None  # type, message, where, at
    started_at: float = field(default_factory=time.time)
    discarded: int = 0  # rollouts that returned no group (and nothing to retry)
    discarded_in_a_row: int = 0  # ... since the last scored group
    last_discard: dict[str, Any] | None = None  # at, replies, scores (None: the environment shows none)
    requests: Requests = field(default_factory=Requests)


def where(exc: BaseException) -> str:
    """The innermost frame of the traceback in the user's code (not in a library), as file:line in func."""
    frames = traceback.extract_tb(exc.__traceback__)
    own = [f for f in frames if not f.filename.startswith(_LIBRARY_DIRS)] or frames
    if not own:
        return "unknown"
    frame = own[-1]
    return f"{os.path.basename(frame.filename)}:{frame.lineno} in {frame.name}"


class HealthRecorder:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.health = Health()
        self._started: dict[int, float] = {}  # request tries in flight: ticket -> start
        self._tickets = 0
        self._write()

    def scored(self) -> None:
        self.health.groups += 1
        self.health.discarded_in_a_row = 0
        self.health.last_group_at = time.time()
        self._write()

    def discarded(
        self, replies: list[str], scores: list[float] | None, too_long: tuple[int, int] | None = None
    ) -> None:
        """`too_long`: (its longest sequence, the trainer's limit) for a group atroposlib will skip."""
        self.health.discarded += 1
        self.health.discarded_in_a_row += 1
        self.health.last_discard = {
            "at": time.time(),
            "replies": [r[:REPLY_CHARS] for r in replies],
            "scores": scores,
            **({"too_long": {"longest": too_long[0], "limit": too_long[1]}} if too_long else {}),
        }
        self._write()

    def raised(self, exc: BaseException) -> None:
        self.health.errors += 1
        message = str(exc).strip().splitlines()[0][:500] if str(exc).strip() else ""
        self.health.last_error = {
            "type": type(exc).__name__,
            "message": message,
            "where": where(exc),
            "at": time.time(),
        }
        self._write()

    # -- model requests (model_requests) ----------------------------------------------------------

    def client_timeout(
        self, seconds: float | None, basis: str | None = None, seconds_per_token: float | None = None
    ) -> None:
        req = self.health.requests
        req.client_timeout_s = seconds
        req.client_timeout_basis = basis
        req.seconds_per_token = seconds_per_token if seconds_per_token is not None else req.seconds_per_token

    def client_retried(self, cause: str) -> None:
        req = self.health.requests
        req.client_retries += 1
        req.client_retry_causes[cause] = req.client_retry_causes.get(cause, 0) + 1
        self._write()

    def request_started(self, asked: int | None) -> int:
        self._tickets += 1
        self._started[self._tickets] = time.time()
        req = self.health.requests
        req.sent += 1
        if asked is not None:
            req.max_asked = max(asked, req.max_asked or 0)
        self._in_flight_changed()
        return self._tickets

    def request_failed(self, ticket: int, *, timed_out: bool) -> None:
        self._started.pop(ticket, None)
        req = self.health.requests
        if timed_out:
            req.timeouts += 1
            req.last_timeout_at = time.time()
        else:
            req.failed += 1
        self._in_flight_changed()

    def request_answered(self, ticket: int, reply: Answered) -> None:
        self._started.pop(ticket, None)
        req = self.health.requests
        req.answered += 1
        req.replies += len(reply.replies)
        req.reply_tokens += reply.reply_tokens or 0
        at_cap = sum(r.at_cap for r in reply.replies)
        if at_cap:
            req.replies_at_cap += at_cap
            per_reply = reply.reply_tokens // len(reply.replies) if reply.reply_tokens else None
            req.last_at_cap = {
                "asked": reply.asked,
                "prompt_tokens": reply.prompt_tokens,
                "reply_tokens": per_reply,
                "at": time.time(),
            }
        self._in_flight_changed()

    def _in_flight_changed(self) -> None:
        self.health.requests.in_flight = len(self._started)
        self.health.requests.oldest_in_flight_at = min(self._started.values(), default=None)
        self._write()

    def _write(self) -> None:
        atomic_write_text(self.path, json.dumps(asdict(self.health)))


def _has_group(result: Any) -> bool:
    """A ScoredDataGroup, or a list holding at least one."""
    if isinstance(result, list):
        return any(_has_group(r) for r in result)
    return isinstance(result, dict) and bool(result)


def _too_long(result: Any, limit: Any) -> tuple[int, int] | None:
    """(longest sequence, limit) when a group holds a sequence atroposlib's handle_send_to_api skips
    it for: as long as the trainer's `max_token_len` or longer (the trainer registered it; -1: none)."""
    groups = result if isinstance(result, list) else [result]
    lengths = [len(t) for g in groups if isinstance(g, dict) for t in g.get("tokens") or []]
    if not isinstance(limit, int) or limit <= 0 or not lengths or max(lengths) < limit:
        return None
    return max(lengths), limit


def _scores_since(env: Any, before: int) -> list[float] | None:
    """What the environment added to `percent_correct_buffer` (Atropos' convention: each reply's
    score or correctness) since it held `before` values; None where it keeps no such list."""
    buffer = getattr(env, "percent_correct_buffer", None)
    if not isinstance(buffer, list):
        return None
    added = buffer[before:] if len(buffer) >= before else buffer  # emptied meanwhile (logged to W&B)
    try:
        return [round(float(x), 4) for x in added[-SCORES_KEPT:]]
    except (TypeError, ValueError):
        return None


def install(path: Path, timeouts: Policy | None = None) -> None:
    """Record every environment instance's `collect_trajectories` and model requests (created after this
    call); with `timeouts`, derive each request's timeout from the run's work (`request_timeouts`)."""
    from atroposlib.envs.base import BaseEnv

    recorder = HealthRecorder(path)
    fitter = TimeoutFitter(timeouts) if timeouts is not None else None
    model_requests.install(recorder, fitter)
    original_init = BaseEnv.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        if fitter is not None:
            fitter.attach(self)
        collect = self.collect_trajectories

        async def collect_trajectories(item: Any) -> Any:
            buffer = getattr(self, "percent_correct_buffer", None)
            before = len(buffer) if isinstance(buffer, list) else 0
            try:
                with collecting_replies() as replies:
                    result = await collect(item)
            except Exception as exc:
                recorder.raised(exc)
                raise
            if isinstance(result, tuple) and result:
                if too_long := _too_long(result[0], getattr(self, "max_token_len", None)):
                    recorder.discarded(replies, _scores_since(self, before), too_long)
                elif _has_group(result[0]):
                    recorder.scored()
                elif not (len(result) > 1 and result[1]):  # nothing to score, nothing put back to retry
                    recorder.discarded(replies, _scores_since(self, before))
            return result

        self.collect_trajectories = collect_trajectories
        count_items(self, RunFiles(path.parent).items)

    BaseEnv.__init__ = __init__  # type: ignore[method-assign]


def count_items(env: Any, items_file: Path) -> None:
    """For an environment that draws its own items (its `get_next_item` is the user's): what its
    groups say of each item, keyed by the item as it gives it, in items.json; nothing is changed."""
    ledger = ItemLedger(COUNTED_WINDOW)
    send = env.handle_send_to_api

    async def handle_send_to_api(scored_data: Any, item: Any = None, *args: Any, **kwargs: Any) -> Any:
        if getattr(env, "item_draw", None) is None:  # the product's draw keeps its own record
            ledger.record_groups(repr(item)[:ITEM_KEY_CHARS], scored_data)
            write_items_file(items_file, ledger, total=None, drawn_by="environment")
        return await send(scored_data, item, *args, **kwargs)

    env.handle_send_to_api = handle_send_to_api
