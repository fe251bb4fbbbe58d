"""The application: one per server process, shared by every connection.

Created in `main()` by `open_app`, outside the SDK's lifespan (which over SSE is entered once per
connection), together with the anyio task group that owns background work such as training runs:
a client disconnecting never cancels it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager, nullcontext
from dataclasses import dataclass
from functools import partial

import anyio
import anyio.abc

from rl_mcp.engines.from_profile import attached_url, managed_engine
from rl_mcp.engines.service import EngineService
from rl_mcp.environments.discovery import Catalog, Discovery
from rl_mcp.environments.introspection import Introspector
from rl_mcp.environments.packages.install import EnvPackages, Report, Runtime
from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo
from rl_mcp.errors import UserError
from rl_mcp.formats import FORMATS
from rl_mcp.runs.manager import RunManager
from rl_mcp.runs.store import StoreError
from rl_mcp.runtimes import ensure_runtime
from rl_mcp.runtimes.maker import RuntimeUnavailable
from rl_mcp.serving.manager import ServeManager
from rl_mcp.session.state import Session
from rl_mcp.settings import Settings
from rl_mcp.statelock import acquire as lock_state_dir
from rl_mcp.tool_servers.listing import ToolServers

logger = logging.getLogger("rl_mcp")


class NoSelection(UserError):
    """No environment is selected, or the selected one is gone."""


class UnknownEnvironment(UserError):
    """No environment of that name in the env dirs."""


class RunsUnavailable(UserError):
    """The run registry could not be opened; the other tools keep serving."""


@dataclass
class AppContext:
    settings: Settings
    session: Session
    discovery: Discovery
    introspector: Introspector
    task_group: anyio.abc.TaskGroup
    # None when the run registry cannot be opened (then `runs_unavailable` says why).
    runs_manager: RunManager | None = None
    runs_unavailable: str | None = None
    serve_manager: ServeManager | None = None  # with the run registry: it serves the runs' weights
    engine: EngineService | None = None  # the SkyRL engine this server manages for its profile
    tool_servers_listing: ToolServers | None = None

    @property
    def tool_servers(self) -> ToolServers:
        """The user's MCP tool servers and their tools (listed in a child process, cached)."""
        if self.tool_servers_listing is None:
            self.tool_servers_listing = ToolServers(self.settings)
        return self.tool_servers_listing

    @property
    def packages(self) -> EnvPackages:
        """The environment folders' installs (shared with the introspector: one install at a time)."""
        return self.introspector.packages

    @property
    def engine_url(self) -> str | None:
        """Where runs reach the profile's self-hosted Tinker engine (managed or attached), else None."""
        return self.engine.url if self.engine is not None else attached_url(self.settings)

    def engine_hold(
        self, url: str | None, report: Callable[[str], Awaitable[None]] | None = None
    ) -> AbstractAsyncContextManager[object]:
        """The managed engine kept running while a checkpoint is downloaded from `url` (a self-hosted
        run's engine; restarted if it stopped when idle). Nothing to hold for another engine or none."""
        if self.engine is None or not url or url.rstrip("/") != self.engine.url.rstrip("/"):
            return nullcontext()
        return self.engine.hold(report)

    @property
    def runs(self) -> RunManager:
        """The run manager, or RunsUnavailable saying why there is none."""
        if self.runs_manager is None:
            raise RunsUnavailable(self.runs_unavailable or "training runs are not available in this server")
        return self.runs_manager

    @property
    def serving(self) -> ServeManager:
        """The served models' manager, or RunsUnavailable saying why there is none (it needs the runs)."""
        if self.serve_manager is None:
            raise RunsUnavailable(self.runs_unavailable or "served models are not available in this server")
        return self.serve_manager

    async def aclose(self) -> None:
        """Release what the app holds (once; a second call waits for the first): on exit, and when a
        stdio server's stdin closes or it is sent SIGTERM. Served models first: stopping them takes a
        moment, and a stdio client kills the server 2 s after it closes stdin."""
        if self.serve_manager is not None:
            await self.serve_manager.shutdown(stop_served=self.settings.stop_runs_on_exit)
        if self.runs_manager is not None:
            await self.runs_manager.shutdown(stop_runs=self.settings.stop_runs_on_exit)

    def catalog(self) -> Catalog:
        """A fresh scan of the env dirs (cheap: files are re-parsed only when they change)."""
        return self.discovery.scan()

    def environment(self, name: str) -> EnvironmentInfo:
        """The environment called `name`, or UnknownEnvironment listing the known ones."""
        catalog = self.catalog()
        info = catalog.environments.get(name)
        if info is None:
            known = ", ".join(sorted(catalog.environments)) or "none found"
            raise UnknownEnvironment(
                f"unknown environment {name!r}: known environments are {known} (see rl_list_environments)"
            )
        return info

    def selected(self) -> EnvironmentInfo:
        """The selected environment as found now, or NoSelection saying what to do."""
        state = self.session.state
        if not state.environment:
            raise NoSelection("no environment is selected: call rl_list_environments, then rl_select_environment(name)")
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

    async def runnable_schema(self, report: Report | None = None) -> tuple[EnvironmentInfo, ConfigSchema]:
        """As `selected_schema`, for a run or an inference test: refused at once for an environment
        that cannot run here (a folder whose dependencies cannot be met); the runtimes it runs in are
        made and an environment folder is installed first when needed (`report`: progress)."""
        info = self.selected()
        if refused := FORMATS[info.format].refusal(info):  # e.g. a Hub or Docker source, a folder without its app
            raise UserError(f"environment {info.name!r} cannot run: {refused}")
        await self.runtime(info, report)
        return info, await self.introspector.schema(info)

    async def runtime(self, info: EnvironmentInfo, report: Report | None = None) -> Runtime:
        """Where `info`'s environment process runs: the training runtime and its format's made first
        when they are not (minutes, once), its folder installed when needed."""
        await self.training_runtime(report)
        runtime = FORMATS[info.format].runtime
        if runtime is not None:
            try:
                await ensure_runtime(runtime, self.settings.environ, report)
            except RuntimeUnavailable as exc:
                raise RuntimeUnavailable(f"environment {info.name!r} cannot run: {exc}") from exc
        return await self.packages.runtime(info.name, info.format, info.package, report)

    async def training_runtime(self, report: Report | None = None) -> None:
        """The training runtime, made first when it is not: every child of the product runs on it; and
        vLLM's where the profile's runs sample with a server of their own."""
        await ensure_runtime("training", self.settings.environ, report)
        if self.settings.profile.runs_own_vllm:
            await ensure_runtime("vllm", self.settings.environ, report)


@asynccontextmanager
async def open_app(settings: Settings) -> AsyncIterator[AppContext]:
    """The process-wide app; its task group outlives every connection.

    Holds the state dir's lock for its whole life (StateDirLocked when another server has it)."""
    settings.home.mkdir(parents=True, exist_ok=True)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # readiness probes would log every 0.2 s
    lock = lock_state_dir(settings.home)
    async with AsyncExitStack() as stack:
        stack.callback(lock.release)  # runs after everything else: the runs are settled first
        tg = await stack.enter_async_context(anyio.create_task_group())
        app = AppContext(
            settings=settings,
            session=Session.load(settings.state_file),
            discovery=Discovery.for_settings(settings),
            introspector=Introspector(settings, EnvPackages(settings.home, settings.environ, settings.python)),
            task_group=tg,
        )
        stack.callback(tg.cancel_scope.cancel)  # runs last: after the manager's shutdown
        try:
            manager = await stack.enter_async_context(RunManager(settings))

            def in_use() -> bool:  # a run of this server trains on the engine
                return any(rec.active for rec in manager.supervised())

            app.engine = manager.engine = managed_engine(settings, tg, manager.ports, in_use)
            await manager.attach(tg)  # re-adopts runs an earlier lifetime left going
            app.runs_manager = manager
            serving = ServeManager(settings, manager.get, manager.ports)
            stack.push_async_callback(partial(serving.shutdown, stop_served=settings.stop_runs_on_exit))
            serving.attach()  # re-adopts the models an earlier lifetime left serving
            app.serve_manager = serving
        except StoreError as exc:
            app.runs_unavailable = str(exc)
            logger.error("training runs unavailable: %s", exc)
        yield app
