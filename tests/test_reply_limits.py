"""The pure parts of "no silent waits": when an environment that discards every group is given up
on, what caps a reply and the field to change, the inference server's per-turn cap, and the
request accounting of an environment process (against fake atroposlib results)."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from loopback_http import loopback_http

from rl_mcp.runs.env_health import Requests, discarding, read_health, stalled
from rl_mcp.runs.reply_length import at_cap, config_note, limit, timeouts_line
from rl_mcp.settings import EnvLimits
from tinker_atropos.env_process.health import HealthRecorder
from tinker_atropos.env_process.model_requests import OPENAI_LOGGER, answered, count_client_retries, counted_request
from tinker_atropos.reply_cap import ReplyCap, context_tokens

LIMITS = EnvLimits(error_timeout_s=120, discard_timeout_s=120, discard_groups=20)


@pytest.fixture
def model_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tiny-chat's folder as the offline cache would hold it: a 4096-token context."""
    monkeypatch.setenv("TINKER_ATROPOS_CACHE", str(tmp_path))
    folder = tmp_path / "models" / "tiny-chat"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    return folder


TINKER = {"base_model": "tiny-chat", "max_reply_tokens": 1024}


def recorded(tmp_path: Path, discards: int) -> Path:
    path = tmp_path / "env_health.json"
    recorder = HealthRecorder(path)
    for _ in range(discards):
        recorder.discarded(["", "olleh"], [0.0, 0.0])
    return path


def test_a_run_that_discards_every_group_fails_on_evidence_not_on_the_clock_alone(tmp_path: Path) -> None:
    path = recorded(tmp_path, 3)
    now = read_health(path).discards.at  # type: ignore[union-attr]
    assert stalled(path, now - 10, LIMITS, now=now) is None
    # a slow environment (a minute a group) whose first groups tie goes on: 3 in a row is not 20
    assert stalled(path, now - 130, LIMITS, now=now) is None
    # enough in a row, and for as long as that many of its groups take (here 4 s a group)
    assert stalled(path, now - 12, EnvLimits(discard_groups=3, discard_timeout_s=5), now=now) is not None
    assert stalled(path, now - 12, EnvLimits(discard_groups=3, discard_timeout_s=60), now=now) is None
    assert stalled(path, now - 12, EnvLimits(discard_groups=4, discard_timeout_s=5), now=now) is None
    # discards alone for the hard limit end it however few
    why = stalled(path, now - 130, EnvLimits(discard_hard_limit_s=100), now=now)
    assert why is not None and why.startswith("the environment discarded every group for 130 s (3 in a row")
    assert "scores [0.0, 0.0]" in why and "sample replies: ''; 'olleh'" in why
    assert "here every reply scored 0" in why and "here most replies are under 40 characters" in why


def test_rl_test_inference_stops_its_bounded_wait_on_either(tmp_path: Path) -> None:
    health = read_health(recorded(tmp_path, 3))
    assert health is not None and health.discards is not None
    now = health.discards.at
    assert discarding(health, now - 10, LIMITS, now) is None
    assert discarding(health, now - 10, EnvLimits(discard_groups=3), now) is not None
    assert discarding(health, now - 130, LIMITS, now) is not None


def test_a_scored_group_restarts_the_count(tmp_path: Path) -> None:
    recorder = HealthRecorder(tmp_path / "other.json")
    recorder.discarded(["x"], None)
    recorder.scored()
    health = read_health(tmp_path / "other.json")
    assert health is not None and health.discards is not None and health.discards.in_a_row == 0
    assert stalled(tmp_path / "other.json", 0.0, EnvLimits(discard_groups=1), now=1e12) is None


def test_the_inference_servers_cap_applies_past_the_context_only() -> None:
    cap = ReplyCap(context=4096, max_reply_tokens=1024)
    assert (cap.limit(100), cap.limit(4096), cap.limit(16000)) == (100, 4096, 1024)
    assert ReplyCap(context=None, max_reply_tokens=1024).limit(16000) == 16000
    assert context_tokens("Qwen/Qwen3-8B") is None


def test_what_cuts_a_reply_and_the_field_to_change(model_dir: Path) -> None:
    env = {"max_token_length": 16000, "max_completion_tokens": 64, "group_size": 8}
    assert context_tokens(model_dir) == 4096
    product = limit(16000, 50, env, TINKER)
    assert (product.cut_by, product.field) == ("max_reply_tokens", "max_reply_tokens")
    assert "asks for 16000, more than the model's 4096-token context" in product.summary
    context = limit(16000, 3500, env, TINKER)  # 596 tokens of room: less than the cap
    assert (context.cut_by, context.field) == ("context", None) and "leaving 596" in context.summary
    own = limit(64, 50, env, TINKER)
    assert (own.cut_by, own.field) == ("max_completion_tokens", "max_completion_tokens")
    remote = limit(16000, 50, env, None)  # another server: the product caps nothing there
    assert (remote.cut_by, remote.field) == ("max_token_length", "max_token_length")
    assert limit(None, None, env, None).cut_by == "max_tokens"


def test_the_config_states_the_cap_where_a_field_asks_past_the_context(model_dir: Path) -> None:
    note = config_note({"max_token_length": 16000, "group_size": 8}, TINKER, "tiny-chat")
    assert note is not None and note.startswith("max_token_length = 16000: more tokens a reply than tiny-chat's 4096")
    assert "max_reply_tokens = 1024 tokens a turn" in note
    assert config_note({"max_token_length": 256}, TINKER, "tiny-chat") is None
    assert config_note({"max_token_length": 16000}, {"base_model": "Qwen/Qwen3-8B"}, "Qwen/Qwen3-8B") is None


def test_requests_that_time_out_name_the_field(model_dir: Path) -> None:
    requests = Requests(sent=3, timeouts=2, client_retries=4, client_timeout_s=120, max_asked=16000)
    line = timeouts_line(requests, {"max_token_length": 16000}, TINKER, now=0.0)
    assert line is not None and line.startswith("2 request tries outlived the client's 120 s timeout and 4 were sent")
    assert "lower max_reply_tokens" in line
    waiting = Requests(sent=1, in_flight=1, oldest_in_flight_at=100.0, client_timeout_s=120, max_asked=200)
    assert timeouts_line(waiting, {"max_token_length": 200}, TINKER, now=150.0) is None
    assert "in flight 130 s" in (timeouts_line(waiting, {"max_token_length": 200}, TINKER, now=230.0) or "")
    assert "lower max_token_length" in (timeouts_line(waiting, {"max_token_length": 200}, TINKER, now=230.0) or "")
    assert at_cap(requests, {}, TINKER) is None


def chat(*choices: tuple[str, str], completion_tokens: int | None = None) -> Any:
    return SimpleNamespace(
        choices=[SimpleNamespace(message=SimpleNamespace(content=t), finish_reason=f) for t, f in choices],
        usage=SimpleNamespace(completion_tokens=completion_tokens, prompt_tokens=7),
    )


def test_an_environments_requests_are_counted_from_what_atroposlib_returns(tmp_path: Path) -> None:
    got = answered(chat(("hi", "stop"), ("aaaa", "length"), completion_tokens=9), {"max_tokens": 8}, None)
    assert [(r.text, r.at_cap) for r in got.replies] == [("hi", False), ("aaaa", True)]
    assert (got.reply_tokens, got.prompt_tokens, got.asked) == (9, 7, 8)
    tokens = ([1, 2, 3], [[5, 6], [7]], [[-0.1, -0.2], [-0.3]], [{"type": "length", "length": 2}, "stop"])
    got = answered(tokens, {"max_tokens": 2}, lambda ids: "".join(map(str, ids)))
    assert [(r.text, r.at_cap) for r in got.replies] == [("56", True), ("7", False)]
    assert (got.reply_tokens, got.prompt_tokens) == (3, 3)

    recorder = HealthRecorder(tmp_path / "env_health.json")
    first, second = recorder.request_started(8), recorder.request_started(16000)
    recorder.request_failed(first, timed_out=True)
    recorder.client_retried("timeout")
    recorder.request_answered(second, got)
    req = read_health(tmp_path / "env_health.json").requests  # type: ignore[union-attr]
    assert (req.sent, req.answered, req.timeouts, req.client_retries, req.in_flight) == (2, 1, 1, 1, 0)
    assert (req.replies, req.replies_at_cap, req.reply_tokens, req.max_asked) == (2, 1, 3, 16000)
    assert req.last_at_cap is not None and (req.last_at_cap.asked, req.last_at_cap.prompt_tokens) == (2, 3)


COMPLETION = {
    "id": "c",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}],
}


class _Unsteady(BaseHTTPRequestHandler):
    """Answers each request as the next of `script` says: hang past the client's timeout, drop the
    connection unanswered, a 503, or a completion."""

    script: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        what = type(self).script.pop(0) if type(self).script else "answer"
        if what == "hang":
            time.sleep(1.0)
        if what in ("hang", "drop"):
            self.close_connection = True
            return
        status, body = (503, b"{}") if what == "503" else (200, json.dumps(COMPLETION).encode())
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("retry-after-ms", "10")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def unsteady_server() -> Iterator[str]:
    with loopback_http(_Unsteady) as url:
        yield f"{url}/v1"


def test_the_clients_retries_of_model_requests_are_counted_by_their_cause(
    unsteady_server: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A retry after a dropped connection or a 503 is no timeout: the timeout findings count only those
    after one. A retry outside a model request (atroposlib's server check, a request a second) is not
    counted at all. The client's debug lines that name the cause go no further than the count."""
    import openai

    caplog.set_level(logging.INFO)
    recorder = HealthRecorder(tmp_path / "env_health.json")
    retries = count_client_retries(recorder)
    client = openai.AsyncOpenAI(base_url=unsteady_server, api_key="x", timeout=0.5, max_retries=3)
    create = counted_request(client.chat.completions.create, SimpleNamespace(), recorder, None)
    asked = {"model": "m", "messages": [{"role": "user", "content": "2+2"}]}

    async def check_then_ask() -> tuple[Any, Any]:
        _Unsteady.script = ["drop"]
        checked = await client.chat.completions.create(**asked)  # as atroposlib's check asks
        _Unsteady.script = ["hang", "drop", "503"]
        return checked, await create(**asked)

    try:
        checked, reply = asyncio.run(check_then_ask())
    finally:
        logging.getLogger(OPENAI_LOGGER).removeFilter(retries)
    assert checked.choices[0].message.content == reply.choices[0].message.content == "4"
    req = read_health(tmp_path / "env_health.json").requests  # type: ignore[union-attr]
    assert (req.sent, req.answered, req.client_retries) == (1, 1, 3), req
    assert req.client_retry_causes == {"timeout": 1, "connection RemoteProtocolError": 1, "status 503": 1}, req
    assert req.retries_after_timeout == 1
    shown = [r.getMessage() for r in caplog.records if r.name == OPENAI_LOGGER]
    assert len(shown) == 4 and all(m.startswith("Retrying request") for m in shown), shown
    assert Requests(client_retries=2).retries_after_timeout == 2  # a file from before the causes were kept
