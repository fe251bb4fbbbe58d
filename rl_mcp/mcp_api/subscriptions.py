"""Pushes run resource changes to MCP clients of both protocol generations, throttled.

2026-era clients listen on `subscriptions/listen`: events go to the SDK's SubscriptionBus, whose
listen handler filters by the URIs each client asked for. 2025-era clients (Hermes, Claude
Desktop, Inspector) send `resources/subscribe`; we remember their sessions per URI and notify them
directly. Every push goes through one loop that sends a URI at most once per `min_interval_s`
(2 a second by default), however fast a log grows. This is the only module that touches the
SDK's lowlevel server (for the 2025-era subscribe methods).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.subscriptions import ResourcesListChanged, ResourceUpdated, SubscriptionBus
from mcp_types import EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams

from rl_mcp.logs import ChangeWatcher
from rl_mcp.runs.store import RunRecord
from tinker_atropos.run_files import ProcessName

log = logging.getLogger(__name__)

RUNS_URI = "rl://runs"


def run_uri(run_id: str) -> str:
    return f"{RUNS_URI}/{run_id}"


def run_file_uris(rec: RunRecord) -> dict[str, list[Path]]:
    """A run's file-backed resources: URI -> the files behind it."""
    base = run_uri(rec.run_id)
    out = {f"{base}/metrics": [rec.files.metrics, rec.files.evals]}
    out.update({f"{base}/logs/{name}": [rec.log_path(name)] for name in ProcessName})
    return out


class ResourcePublisher:
    """A RunListener that turns run changes into resource notifications."""

    def __init__(self, bus: SubscriptionBus, *, min_interval_s: float = 0.5) -> None:
        self.bus = bus
        self.min_interval_s = min_interval_s
        self._dirty: set[str] = set()
        self._list_dirty = False
        self._last_sent: dict[str, float] = {}
        self._legacy: dict[str, set[Any]] = {}  # uri -> ServerSessions subscribed to it
        self._legacy_sessions: set[Any] = set()  # every 2025-era session that subscribed to anything
        self._watch = ChangeWatcher()

    # RunListener: called by the manager; cheap, never blocks

    def run_changed(self, rec: RunRecord) -> None:
        self._dirty.update((run_uri(rec.run_id), RUNS_URI))
        if not rec.active:  # its last lines may land between two ticks of the watcher
            for uri, paths in run_file_uris(rec).items():
                self._dirty.add(uri)
                for path in paths:
                    self._watch.forget(path)

    def runs_list_changed(self) -> None:
        self._list_dirty = True
        self._dirty.add(RUNS_URI)

    # 2025-era resources/subscribe, resources/unsubscribe (lowlevel request handlers)

    async def on_subscribe(self, ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        self._legacy.setdefault(str(params.uri), set()).add(ctx.session)
        self._legacy_sessions.add(ctx.session)
        return EmptyResult()

    async def on_unsubscribe(self, ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        self._legacy.get(str(params.uri), set()).discard(ctx.session)
        return EmptyResult()

    def subscribed(self, uri: str) -> int:
        return len(self._legacy.get(uri, ()))

    # the push loop

    async def run(self, supervised: Callable[[], list[RunRecord]], *, interval_s: float | None = None) -> None:
        """Forever: mark URIs whose files changed, then flush what the throttle allows."""
        tick = interval_s or self.min_interval_s / 2
        while True:
            watched = {uri: paths for rec in supervised() for uri, paths in run_file_uris(rec).items()}
            for uri, paths in watched.items():
                # every path is stamped each tick, so one change is never reported twice
                if sum(self._watch.changed(p) for p in paths):
                    self._dirty.add(uri)
            await self.flush()
            await anyio.sleep(tick)

    async def flush(self) -> None:
        now = time.monotonic()
        # a URI last sent longer ago than the interval throttles nothing: forget it
        self._last_sent = {u: t for u, t in self._last_sent.items() if now - t < self.min_interval_s}
        if self._list_dirty:
            self._list_dirty = False
            await self.bus.publish(ResourcesListChanged())
            for session in list(self._legacy_sessions):
                await self._send(session, None)
        for uri in sorted(self._dirty):
            if now - self._last_sent.get(uri, -1e9) < self.min_interval_s:
                continue  # stays dirty: sent on a later tick
            self._dirty.discard(uri)
            self._last_sent[uri] = now
            await self.bus.publish(ResourceUpdated(uri=uri))
            for session in list(self._legacy.get(uri, ())):
                await self._send(session, uri)

    async def _send(self, session: Any, uri: str | None) -> None:
        try:
            with anyio.fail_after(2):
                if uri is None:
                    await session.send_resource_list_changed()
                else:
                    await session.send_resource_updated(uri)
        except Exception as exc:  # a closed connection: forget the session
            log.debug("dropping a 2025-era subscriber (%s)", exc)
            self._legacy_sessions.discard(session)
            for sessions in self._legacy.values():
                sessions.discard(session)


def install_legacy_subscriptions(server: MCPServer, publisher: ResourcePublisher) -> None:
    """2025-era clients subscribe per URI; the SDK documents the lowlevel API for these methods."""
    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, publisher.on_subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, publisher.on_unsubscribe)
