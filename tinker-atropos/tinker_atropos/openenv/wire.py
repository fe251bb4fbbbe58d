"""The client side of OpenEnv's `/ws` protocol, one episode per connection.

The server keeps an episode's environment for the life of one WebSocket: `reset` and `step`
frames go out as `{"type", "data"}` (then `close`), and `observation` or `error` frames come
back. The HTTP `/reset` and `/step` routes build a new environment per request, so they cannot hold
an episode. A server at capacity accepts the connection, sends a `CAPACITY_REACHED` error and closes
it: `open_episode` waits for a free session until its deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

CAPACITY_RETRY_S = 0.25
MAX_FRAME_BYTES = 16 * 1024 * 1024


class OpenEnvError(RuntimeError):
    """The server answered with an error frame (its code and message), or not at all."""

    def __init__(self, message: str, code: str = "") -> None:
        super().__init__(message)
        self.code = code


class CapacityRefused(OpenEnvError):
    """Every session of the server was taken for as long as the episode could wait."""


class ServerGone(OpenEnvError):
    """The connection could not be made, or closed under an episode: the server is down."""


class EpisodeTimeout(OpenEnvError):
    """The server did not answer a frame within its timeout."""


@dataclass(frozen=True)
class StepResult:
    """One observation frame: the observation's own fields, its reward and whether the episode ended."""

    observation: dict[str, Any]
    reward: float | None
    done: bool
    metadata: dict[str, Any] = field(default_factory=dict)


def ws_url(base_url: str) -> str:
    """`http://host:port[/prefix]` -> `ws://host:port[/prefix]/ws`."""
    base = base_url.rstrip("/")
    for http, ws in (("https://", "wss://"), ("http://", "ws://")):
        if base.startswith(http):
            base = ws + base[len(http) :]
    return f"{base}/ws"


class Episode:
    """One live episode on a server: each frame answered in turn, within `timeout_s`."""

    def __init__(self, connection: ClientConnection, url: str, timeout_s: float) -> None:
        self._ws = connection
        self.url = url
        self.timeout_s = timeout_s

    async def _ask(self, kind: str, data: dict[str, Any]) -> dict[str, Any]:
        try:
            await self._ws.send(json.dumps({"type": kind, "data": data}))
        except ConnectionClosed:
            pass  # a server that refused the session sent why, then closed: its frame is still to be read
        try:
            raw = await asyncio.wait_for(self._ws.recv(), self.timeout_s)
        except TimeoutError:
            raise EpisodeTimeout(
                f"the OpenEnv server at {self.url} did not answer a {kind!r} within {self.timeout_s:g} s"
            ) from None
        except ConnectionClosed as exc:
            raise ServerGone(f"the OpenEnv server at {self.url} closed the episode during a {kind!r} ({exc})") from None
        try:
            frame = json.loads(raw)
        except ValueError:
            raise OpenEnvError(
                f"the OpenEnv server at {self.url} answered a {kind!r} with non-JSON: {raw!r:.200}"
            ) from None
        if not isinstance(frame, dict):
            raise OpenEnvError(f"the OpenEnv server at {self.url} answered a {kind!r} with {frame!r:.200}")
        body = frame.get("data") if isinstance(frame.get("data"), dict) else {}
        if frame.get("type") == "error":
            code = str(body.get("code", ""))
            message = str(body.get("message", "")) or "no message"
            errors = body.get("errors")
            if errors:
                message += f": {json.dumps(errors)[:1000]}"
            kind_of = CapacityRefused if code == "CAPACITY_REACHED" else OpenEnvError
            raise kind_of(message, code)
        return body

    async def reset(self, **kwargs: Any) -> StepResult:
        return _step_result(await self._ask("reset", kwargs))

    async def step(self, action: dict[str, Any]) -> StepResult:
        return _step_result(await self._ask("step", action))


def _step_result(body: dict[str, Any]) -> StepResult:
    observation = body.get("observation")
    reward = body.get("reward")
    metadata = body.get("metadata")
    return StepResult(
        observation=observation if isinstance(observation, dict) else {},
        reward=float(reward) if isinstance(reward, (int, float)) and not isinstance(reward, bool) else None,
        done=bool(body.get("done")),
        metadata=metadata if isinstance(metadata, dict) else {},
    )


async def _connect(url: str, timeout_s: float) -> ClientConnection:
    try:
        return await connect(url, open_timeout=timeout_s, max_size=MAX_FRAME_BYTES, proxy=None)
    except (OSError, InvalidHandshake, InvalidURI) as exc:
        raise ServerGone(f"the OpenEnv server at {url} cannot be reached: {type(exc).__name__}: {exc}") from None
    except TimeoutError:
        raise ServerGone(f"the OpenEnv server at {url} did not accept a connection within {timeout_s:g} s") from None


@asynccontextmanager
async def open_episode(
    base_url: str, reset: dict[str, Any], *, timeout_s: float, capacity_wait_s: float
) -> AsyncIterator[tuple[Episode, StepResult]]:
    """An episode reset with `reset`'s arguments, and its first observation; its session freed (a
    `close` frame) however the block ends. A server at capacity is asked again until `capacity_wait_s`."""
    url = ws_url(base_url)
    deadline = time.monotonic() + capacity_wait_s
    while True:
        ws = await _connect(url, timeout_s)
        try:
            episode = Episode(ws, url, timeout_s)
            try:
                first = await episode.reset(**reset)
            except CapacityRefused as refused:
                if time.monotonic() >= deadline:
                    raise CapacityRefused(
                        f"every session of the OpenEnv server at {base_url} stayed taken for {capacity_wait_s:g} s "
                        f"({refused}): raise the server's sessions, or lower max_concurrent_sessions",
                        refused.code,
                    ) from None
            else:
                try:
                    yield episode, first
                finally:
                    try:
                        await ws.send(json.dumps({"type": "close"}))
                    except ConnectionClosed:
                        pass
                return
        finally:
            await ws.close()
        await asyncio.sleep(CAPACITY_RETRY_S)
