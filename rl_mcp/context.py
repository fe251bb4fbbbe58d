"""The application context: one per server process, shared by every connection.

Created in `main()` by `open_app`, outside the SDK's lifespan (which over SSE is entered once per
connection), together with the anyio task group that owns background work such as training runs:
a client disconnecting never cancels it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import logging

import anyio
import anyio.abc

from .environments import Catalog, ConfigSchema, Discovery, EnvironmentInfo, Introspector
from .session import Session
from .settings import Settings

if TYPE_CHECKING:
    from .runs.manager import RunManager

logger = logging.getLogger("rl_mcp")


class NoSelection(LookupError):
    """No environment is selected, or the selected one is gone."""


@dataclass
class AppContext:
    settings: Settings
    session: Session
    discovery: Discovery
    introspector: Introspector
    task_group: anyio.abc.TaskGroup
    # The lifecycle layer (rl_mcp/runs) sets this in `open_app`; None until then, or when the run
    # registry cannot be opened (then `runs_unavailable` says why, and the other tools keep serving).
    runs: RunManager | None = None
    runs_unavailable: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    _closed: bool = field(default=False, init=False, repr=False)

    async def aclose(self) -> None:
        """Release what the app holds, once: on exit, and on SIGTERM before a stdio server exits."""
        if self._closed:
            return
        self._closed = True
        if self.runs is not None:
            await self.runs.shutdown(stop_runs=self.settings.stop_runs_on_exit)

    def catalog(self) -> Catalog:
        """A fresh scan of the env dirs (cheap: files are re-parsed only when they change)."""
        return self.discovery.scan()

    def selected(self) -> EnvironmentInfo:
        """The selected environment as found now, or NoSelection saying what to do."""
        state = self.session.state
        if not state.environment:
            raise NoSelection(
                "no environment is selected: call rl_list_environments, then rl_select_environment(name)"
            )
        info = self.catalog().environments.get(state.environment)
        if info is None:
            raise NoSelection(
                f"the selected environment {state.environment!r} ({state.env_file}) is no longer found in "
                "the environment dirs: call rl_list_environments and select another"
            )
        return info

    async def selected_schema(self) -> tuple[EnvironmentInfo, ConfigSchema]:
        """The selected environment and its config fields (cached; a child process on a miss)."""
        info = self.selected()
        return info, await self.introspector.schema(info)


@asynccontextmanager
async def open_app(settings: Settings) -> AsyncIterator[AppContext]:
    """The process-wide context; its task group outlives every connection."""
    settings.home.mkdir(parents=True, exist_ok=True)
    async with anyio.create_task_group() as tg:
        app = AppContext(
            settings=settings,
            session=Session.load(settings.state_file),
            discovery=Discovery(settings.env_dirs),
            introspector=Introspector(settings),
            task_group=tg,
        )
        from .runs.store import StoreError
        from .runs.tools import open_runs

        try:
            app.runs = await open_runs(settings, tg)  # re-adopts runs an earlier lifetime left going
        except StoreError as exc:
            app.runs_unavailable = str(exc)
            logger.error("training runs unavailable: %s", exc)
        try:
            yield app
        finally:
            await app.aclose()
            tg.cancel_scope.cancel()
