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
from mcp_types import EmptyResult, SetLevelRequestParams, SubscribeRequestParams, UnsubscribeRequestParams

from rl_mcp.logs import ChangeWatcher
from rl_mcp.runs.store import RunRecord
from tinker_atropos.run_files import ProcessName

log = logging.getLogger(__name__)

RUNS_URI = "rl://runs"
ENGINE_LOG_URI = "rl://engine/log"
# MCP's log levels, least severe first (logging/setLevel: a session gets its level and above).
LOG_LEVELS = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def run_uri(run_id: str) -> str:
    return f"{RUNS_URI}/{run_id}"


def run_file_uris(rec: RunRecord) -> dict[str, list[Path]]:
    """A run's file-backed resources: URI -> the files behind it."""
    base = run_uri(rec.run_id)
    out = {f"{base}/metrics": [rec.files.metrics, rec.files.evals]}
    out.update({f"{base}/logs/{name}": [rec.log_path(name)] for name in ProcessName})
    return out


def client_of(session: Any) -> Any:
    """The client behind a request's session: the SDK builds a ServerSession per request, all of
    one client's share its connection (the SDK has no public accessor for it)."""
    return getattr(session, "_connection", session)


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
        self._log_levels: dict[Any, str] = {}  # client -> the level it asked for (logging/setLevel)
        self._connections: dict[Any, Any] = {}  # subscribed session -> its client
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
        self._connections[ctx.session] = client_of(ctx.session)
        return EmptyResult()

    async def on_unsubscribe(self, ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        client, group = client_of(ctx.session), self._legacy.get(str(params.uri), set())
        group.difference_update({s for s in group if self._connections.get(s, s) is client})
        return EmptyResult()

    async def on_set_level(self, ctx: Any, params: SetLevelRequestParams) -> EmptyResult:
        self._log_levels[client_of(ctx.session)] = params.level
        return EmptyResult()

    def wants_log(self, session: Any, level: str) -> bool:
        """Whether a session asked for messages at this level (all of them until it sets a level)."""
        wanted = self._log_levels.get(self._connections.get(session), LOG_LEVELS[0])
        return LOG_LEVELS.index(level) >= LOG_LEVELS.index(wanted)

    def subscribed(self, uri: str) -> int:
        return len(self._legacy.get(uri, ()))

    def run_sessions(self, run_id: str) -> list[Any]:
        """One session per 2025-era client subscribed to the run or any of its resources."""
        base = run_uri(run_id)
        found = [s for uri, group in self._legacy.items() if uri == base or uri.startswith(base + "/") for s in group]
        return list({self._connections.get(s, s): s for s in found}.values())

    def forget_session(self, session: Any) -> None:
        """A closed connection: drop the session from every URI."""
        self._legacy_sessions.discard(session)
        self._connections.pop(session, None)
        for sessions in self._legacy.values():
            sessions.discard(session)

    # the push loop

    async def run(
        self,
        supervised: Callable[[], list[RunRecord]],
        *,
        interval_s: float | None = None,
        other_files: Callable[[], dict[str, list[Path]]] = dict,
    ) -> None:
        """Forever: mark URIs whose files changed (the runs', and `other_files`, e.g. the engine's log),
        then flush what the throttle allows."""
        tick = interval_s or self.min_interval_s / 2
        while True:
            watched = {uri: paths for rec in supervised() for uri, paths in run_file_uris(rec).items()}
            watched.update(other_files())
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
            self.forget_session(session)


def install_legacy_subscriptions(server: MCPServer, publisher: ResourcePublisher) -> None:
    """2025-era clients subscribe per URI and set their log level (diagnosis findings arrive as log
    messages, mcp_api/notices.py); the SDK documents the lowlevel API for these methods."""
    lowlevel = server._lowlevel_server
    lowlevel.add_request_handler("logging/setLevel", SetLevelRequestParams, publisher.on_set_level)
    lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, publisher.on_subscribe)
    lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, publisher.on_unsubscribe)
