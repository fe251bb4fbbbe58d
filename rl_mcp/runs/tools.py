"""The five run tools and the rl://runs resources: thin adapters over RunManager and views."""

from __future__ import annotations

import base64
import json
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import anyio
import anyio.abc
import yaml
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.server.subscriptions import InMemorySubscriptionBus, SubscriptionBus
from mcp_types import CallToolResult, ImageContent, SubscribeRequestParams, TextContent, UnsubscribeRequestParams
from pydantic import Field

from rl_mcp import descriptions
from rl_mcp.descriptions import annotations
from rl_mcp.logs import tail_lines
from rl_mcp.metrics import wandb_summary
from rl_mcp.models import RunList, RunResults, RunStarted, RunStatus, RunStopped
from rl_mcp.runs import views
from rl_mcp.runs.events import RUNS_URI, ResourcePublisher
from rl_mcp.runs.manager import RunError, RunManager, RunPlan, status_min_interval
from rl_mcp.runs.store import RunRecord, StoreError
from rl_mcp.session import render_run_config, write_run_config
from rl_mcp.settings import Settings

if TYPE_CHECKING:
    from rl_mcp.context import AppContext

RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"
LOG_LINES = 200

RunId = Annotated[
    str,
    Field(description="A run id from rl_start_training or rl_list_runs", min_length=1, max_length=128,
          pattern=RUN_ID_PATTERN),
]


async def open_runs(settings: Settings, tg: anyio.abc.TaskGroup) -> RunManager:
    """The process-wide RunManager: re-adopts earlier runs and starts the resource push loop."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # readiness probes would log every 0.2 s
    publisher = ResourcePublisher(InMemorySubscriptionBus())
    manager = RunManager(settings, events=publisher)
    await manager.attach(tg)
    tg.start_soon(publisher.run, manager.watched_files)
    return manager


def subscription_bus(app: AppContext) -> SubscriptionBus | None:
    """The bus MCPServer(subscriptions=...) must use so run events reach `subscriptions/listen`."""
    events = app.runs.events if app.runs is not None else None
    return events.bus if isinstance(events, ResourcePublisher) else None


def _manager(app: AppContext) -> RunManager:
    if app.runs is None:
        raise ToolError(app.runs_unavailable or "training runs are not available in this server (no RunManager)")
    return app.runs


def register_run_tools(server: MCPServer, app: AppContext) -> None:
    """Tools, resources and the 2025-era subscribe handlers for runs."""
    last_check: dict[str, float] = {}
    cache = views.MetricsCache()

    def manager() -> RunManager:
        return _manager(app)

    def record(run_id: str) -> RunRecord:
        try:
            return manager().get(run_id)
        except (RunError, StoreError) as exc:
            raise ToolError(str(exc)) from exc

    @server.tool(name="rl_start_training", description=descriptions.RL_START_TRAINING,
                 annotations=annotations("Start training", read_only=False, destructive=False, idempotent=False))
    async def rl_start_training(
        ctx: Context,
        wait: Annotated[bool, Field(description="true: return only once the run is running or has failed, "
                                                "with a progress notification per stage")] = False,
    ) -> RunStarted:
        from rl_mcp.context import NoSelection
        from rl_mcp.environments import IntrospectionError

        try:
            info, schema = await app.selected_schema()
        except (NoSelection, IntrospectionError) as exc:
            raise ToolError(str(exc)) from exc
        state, profile = app.session.state, app.settings.profile

        def write(run_dir: Path, api_port: int, inference_port: int, run_name: str) -> Path:
            config = render_run_config(profile=profile, schema=schema, state=state, api_port=api_port,
                                       inference_port=inference_port, run_dir=run_dir, run_name=run_name)
            return write_run_config(run_dir / "config.yaml", config)

        plan = RunPlan(environment=info.name, env_file=info.file, write_config=write, run_name=state.wandb_name)
        try:
            rec = await manager().start(plan, progress=ctx.report_progress, wait=wait)
        except (RunError, StoreError) as exc:
            raise ToolError(str(exc)) from exc
        return views.started(rec)

    @server.tool(name="rl_check_status", description=descriptions.RL_CHECK_STATUS,
                 annotations=annotations("Check a run", read_only=True, destructive=False, idempotent=False))
    def rl_check_status(run_id: RunId) -> RunStatus:
        rec = record(run_id)
        interval = status_min_interval(app.settings)
        now = time.monotonic()
        if rec.active and run_id in last_check and now - last_check[run_id] < interval:
            return views.rate_limited(rec, interval - (now - last_check[run_id]))
        last_check[run_id] = now
        return views.status(rec, manager().children(run_id), cache, min_interval_s=interval)

    @server.tool(name="rl_stop_training", description=descriptions.RL_STOP_TRAINING,
                 annotations=annotations("Stop a run", read_only=False, destructive=True, idempotent=True))
    async def rl_stop_training(run_id: RunId) -> RunStopped:
        was = record(run_id).status
        rec = await manager().stop(run_id)
        message = (
            f"run {run_id} stopped; nothing of it is running" if was in ("starting", "running", "stopping")
            else f"run {run_id} had already ended ({was}); nothing to stop"
        )
        return RunStopped(run_id=run_id, status=rec.status, was=was,  # type: ignore[arg-type]
                          processes=views.processes_view(rec, {}), message=message)

    @server.tool(name="rl_get_results", description=descriptions.RL_GET_RESULTS,
                 annotations=annotations("Get run results", read_only=True, destructive=False, idempotent=True))
    async def rl_get_results(run_id: RunId) -> Annotated[CallToolResult, RunResults]:
        rec = record(run_id)
        project = _wandb_project(rec.config_path)
        wandb = await wandb_summary(rec.run_name, project) if project else None
        result = views.results(rec, cache, wandb)
        content: list[TextContent | ImageContent] = [TextContent(type="text", text=result.model_dump_json(indent=1))]
        metrics = cache.metrics(rec)
        if metrics:
            from rl_mcp.plots import reward_loss_png

            png = await anyio.to_thread.run_sync(lambda: reward_loss_png(metrics, title=rec.run_id))
            content.append(ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"))
        return CallToolResult(content=content, structured_content=result.model_dump(mode="json"))

    @server.tool(name="rl_list_runs", description=descriptions.RL_LIST_RUNS,
                 annotations=annotations("List runs", read_only=True, destructive=False, idempotent=True))
    def rl_list_runs(
        status: Annotated[
            Literal["starting", "running", "stopping", "completed", "failed", "stopped", "lost"] | None,
            Field(description="Only runs with this status"),
        ] = None,
    ) -> RunList:
        try:
            runs = manager().list(status)
        except (RunError, StoreError) as exc:
            raise ToolError(str(exc)) from exc
        return RunList(runs=[views.summary(r, cache) for r in runs],
                       next_step="rl_check_status(run_id) or rl_get_results(run_id) for one of these.")

    _register_run_resources(server, app, cache)
    publisher = app.runs.events if app.runs is not None else None
    if isinstance(publisher, ResourcePublisher):
        # 2025-era clients subscribe per URI; the SDK documents the lowlevel API for these methods.
        lowlevel = server._lowlevel_server  # noqa: SLF001
        lowlevel.add_request_handler("resources/subscribe", SubscribeRequestParams, publisher.on_subscribe)
        lowlevel.add_request_handler("resources/unsubscribe", UnsubscribeRequestParams, publisher.on_unsubscribe)


def _wandb_project(config_path: str) -> str | None:
    try:
        tinker = (yaml.safe_load(open(config_path)) or {}).get("tinker") or {}
    except (OSError, yaml.YAMLError):
        return None
    return tinker.get("wandb_project") if tinker.get("use_wandb") else None


def _register_run_resources(server: MCPServer, app: AppContext, cache: views.MetricsCache) -> None:
    def record(run_id: str) -> RunRecord:
        if not re.fullmatch(RUN_ID_PATTERN, run_id):
            raise ResourceError(f"invalid run id {run_id!r}")
        try:
            return _manager(app).get(run_id)
        except (RunError, ToolError) as exc:
            raise ResourceNotFoundError(str(exc)) from exc

    @server.resource(RUNS_URI, name="runs", title="Training runs", mime_type="application/json",
                     description="Every training run (rl_list_runs as JSON). Sends list-changed when runs appear.")
    def runs_resource() -> str:
        runs = [views.summary(r, cache).model_dump(mode="json") for r in _manager(app).list()]
        return json.dumps({"runs": runs}, indent=1)

    @server.resource("rl://runs/{run_id}", name="run", title="Training run", mime_type="application/json",
                     description="One run's status (rl_check_status without the rate limit).")
    def run_resource(run_id: str) -> str:
        rec = record(run_id)
        view = views.status(rec, _manager(app).children(run_id), cache,
                            min_interval_s=status_min_interval(app.settings))
        return view.model_dump_json(indent=1)

    @server.resource("rl://runs/{run_id}/config", name="run-config", title="Run config",
                     mime_type="application/yaml", description="The run's config.yaml (holds no secret).")
    def run_config(run_id: str) -> str:
        rec = record(run_id)
        try:
            return open(rec.config_path).read()
        except OSError as exc:
            raise ResourceNotFoundError(f"config of run {run_id} is gone: {exc}") from exc

    @server.resource("rl://runs/{run_id}/metrics", name="run-metrics", title="Run metrics",
                     mime_type="application/json",
                     description="Per-step metrics (downsampled) and evaluations. Subscribable: updates "
                                 "are pushed at most twice a second.")
    def run_metrics(run_id: str) -> str:
        return json.dumps(views.metrics_document(record(run_id), cache), indent=1)

    @server.resource("rl://runs/{run_id}/logs/{process}", name="run-log", title="Run log",
                     mime_type="text/plain",
                     description="The last 200 lines of one process's log: process is api, trainer or env. "
                                 "Subscribable: updates are pushed at most twice a second.")
    def run_log(run_id: str, process: str) -> str:
        if process not in ("api", "trainer", "env"):
            raise ResourceError(f"unknown process {process!r}: use api, trainer or env")
        path = record(run_id).log_path(process)
        if not path.is_file():
            raise ResourceError(f"log file {path} is missing (deleted, or the process never started)")
        return "\n".join(tail_lines(path, LOG_LINES))
