"""A request whose client went away stops generating.

Starlette runs a plain (non-streaming) endpoint to its end even after its client has disconnected:
an atroposlib request that timed out kept its rows decoding, and each retry added another copy of
the same work to a server that was already too slow. This ASGI middleware reads the request's body
first, then runs the endpoint while it waits for `http.disconnect`; a disconnect before the answer
is sent cancels the endpoint, and the sampler's cancellation takes its rows out of the batch at the
next decode step (`backends/local/sampler.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send


@dataclass
class Cancellations:
    """Requests cancelled so far because their client went away (the server's /health)."""

    count: int = 0


class CancelOnDisconnect:
    """Wraps an ASGI app: an HTTP request is cancelled as soon as its client disconnects."""

    def __init__(self, app: ASGIApp, cancellations: Cancellations) -> None:
        self.app = app
        self.cancellations = cancellations

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body: list[Message] = []
        while True:  # the whole body first: after it, the next message can only be the disconnect
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body.append(message)
            if not message.get("more_body", False):
                break
        gone, answered = anyio.Event(), anyio.Event()

        async def sending(message: Message) -> None:
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                answered.set()  # uvicorn's receive now says "disconnect" for a request that is done

        async def replay() -> Message:
            if body:
                return body.pop(0)
            await gone.wait()
            return {"type": "http.disconnect"}

        async with anyio.create_task_group() as tg:

            async def watch() -> None:
                message: dict[str, Any] = dict(await receive())
                if message["type"] == "http.disconnect" and not answered.is_set():
                    gone.set()
                    self.cancellations.count += 1
                    tg.cancel_scope.cancel()

            tg.start_soon(watch)
            await self.app(scope, replay, sending)
            tg.cancel_scope.cancel()  # answered: stop watching
