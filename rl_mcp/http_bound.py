"""The HTTP transports' bound on concurrent work: past it a request is refused at once with 503 and
`Retry-After`, so a burst of clients slows no call already in flight and never exhausts the process.

Two counts, because their lifetimes differ: requests (POST, DELETE: a tool call, a message, a
resource read, each held while it runs) and event streams (GET: `/sse`, `/mcp`'s standalone stream,
each held while its client is connected). A pure ASGI middleware: no rl_mcp import, no SDK import.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

DEFAULT_MAX_REQUESTS = 256  # above the 200 concurrent calls tests/test_reliability_http.py holds the server to
DEFAULT_MAX_STREAMS = 512
RETRY_AFTER_S = 1


@dataclass
class HttpBound:
    """Refuses a request past `max_requests` in flight, or a GET past `max_streams` open, with 503."""

    app: App
    max_requests: int = DEFAULT_MAX_REQUESTS
    max_streams: int = DEFAULT_MAX_STREAMS
    in_flight: dict[str, int] = field(default_factory=lambda: {"requests": 0, "streams": 0})
    refused: int = 0

    def describe(self) -> str:
        return f"at most {self.max_requests} requests and {self.max_streams} event streams at once"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        kind = "streams" if scope.get("method") == "GET" else "requests"
        bound = self.max_streams if kind == "streams" else self.max_requests
        if self.in_flight[kind] >= bound:
            self.refused += 1
            await _refuse(send, kind, bound)
            return
        self.in_flight[kind] += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight[kind] -= 1


async def _refuse(send: Send, kind: str, bound: int) -> None:
    """503 with Retry-After and a JSON-RPC error naming the bound and the flag that sets it."""
    flag = "--max-streams" if kind == "streams" else "--max-requests"
    message = (
        f"server busy: {bound} {kind} already in flight, this server's bound ({flag} {bound}); "
        f"retry after {RETRY_AFTER_S} s"
    )
    body = json.dumps({"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"retry-after", str(RETRY_AFTER_S).encode()),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
