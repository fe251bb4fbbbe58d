"""rl_start_training, rl_check_status, rl_stop_training, rl_get_results, rl_list_runs."""

from __future__ import annotations

import base64
import time
from typing import Annotated

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import AudioContent, CallToolResult, EmbeddedResource, ImageContent, ResourceLink, TextContent
from pydantic import Field

from rl_mcp.app import AppContext
from rl_mcp.distill.teacher import session_teacher
from rl_mcp.mcp_api.descriptions import tool_face
from rl_mcp.mcp_api.errors import tool_errors
from rl_mcp.mcp_api.inputs import RunId
from rl_mcp.mcp_api.links import run_links, with_run_links
from rl_mcp.mcp_api.progress import CallProgress
from rl_mcp.mcp_api.run_view import run_view_meta
from rl_mcp.mcp_api.runs import descriptions
from rl_mcp.mcp_api.spend import SpendConfirmation, confirmed_by, figures_for
from rl_mcp.runs import reports
from rl_mcp.runs.answers import CostEstimate, RunList, RunResults, RunStarted, RunStatus, RunStopped
from rl_mcp.runs.live import RunPlan
from rl_mcp.runs.metrics import MetricsCache
from rl_mcp.runs.start_plan import SessionStart, StartRequest, from_session, resumed
from rl_mcp.runs.store import RunRecord
from rl_mcp.runs.vocab import RunStatus as Status
from rl_mcp.runs.wandb_lookup import wandb_summary


class StatusChecks:
    """When each run was last checked (for the per-run rate limit); a settled run is forgotten."""

    def __init__(self, cache: MetricsCache) -> None:
        self.last: dict[str, float] = {}
        self.cache = cache

    def run_changed(self, rec: RunRecord) -> None:
        if not rec.active:
            self.last.pop(rec.run_id, None)
            self.cache.forget(rec)

    def runs_list_changed(self) -> None:
        return None


def register_run_tools(server: MCPServer, app: AppContext, cache: MetricsCache) -> None:
    checks = StatusChecks(cache)
    if app.runs_manager is not None:
        app.runs_manager.events.add_listener(checks)

    @server.tool(
        name="rl_start_training",
        description=descriptions.RL_START_TRAINING,
        **tool_face("Start training", read_only=False, destructive=False, idempotent=False, open_world=True),
        meta=run_view_meta(),  # the view opens where the run starts, not at the first status check
    )
    @tool_errors
    async def rl_start_training(
        ctx: Context,
        spend: SpendConfirmation,  # filled by the SDK (an elicitation on paid profiles), not by the agent
        wait: Annotated[
            bool,
            Field(
                description="true: return only once the run is running or has failed, "
                "with a progress notification per stage"
            ),
        ] = False,
        resume_from: Annotated[
            RunId | None,
            Field(description="Continue this run from its saved training state (its own config) as a new run"),
        ] = None,
        checkpoint_step: Annotated[
            int | None,
            Field(
                ge=0,
                description="With resume_from: the step of the state to start from (default: the latest); 0: where "
                "its supervised stage ended, before RL's first step",
            ),
        ] = None,
        fork: Annotated[
            bool,
            Field(description="With resume_from: start from its state with the session's current config instead"),
        ] = False,
        total_steps: Annotated[
            int | None,
            Field(ge=1, description="With resume_from: the new total number of steps (e.g. raised)"),
        ] = None,
    ) -> Annotated[CallToolResult, RunStarted]:
        confirmed = confirmed_by(spend)
        cost = await figures_for(app)
        progress = CallProgress(ctx.report_progress)

        async def _started(plan: RunPlan) -> CallToolResult:
            await app.training_runtime(progress.note)  # a resumed run's processes run there too
            rec = await app.runs.start(plan, progress=progress.phase(), wait=wait)
            answer = reports.started(rec)
            if cost is not None:
                answer.cost_estimate = CostEstimate(**cost[0].as_dict(), confirmed=confirmed)
            return with_run_links(answer, rec.run_id)

        request = StartRequest(resume_from, checkpoint_step, fork, total_steps)
        if request.resumes:
            return await _started(resumed(request, app.runs.get, app.catalog()))
        info, schema = await app.runnable_schema(progress.note)
        state, profile = app.session.state, app.settings.profile
        teacher = session_teacher(schema, profile, state, app.runs.list())  # refused here: nothing started yet
        home = (await app.runtime(info)).home  # installed by now: where its code imports from
        start = SessionStart(profile, schema, state, info, home, app.engine_url, teacher)
        return await _started(from_session(start, request, app.runs.get))

    @server.tool(
        name="rl_check_status",
        description=descriptions.RL_CHECK_STATUS,
        **tool_face("Check a run", read_only=True, destructive=False, idempotent=False, open_world=False),
        meta=run_view_meta(),
    )
    @tool_errors
    def rl_check_status(run_id: RunId) -> Annotated[CallToolResult, RunStatus]:
        rec = app.runs.get(run_id)
        interval = app.settings.status_min_interval_s
        now = time.monotonic()
        last = checks.last.get(run_id)
        if rec.active and last is not None and now - last < interval:
            return with_run_links(reports.rate_limited(rec, interval - (now - last)), run_id)
        checks.last[run_id] = now
        return with_run_links(reports.status(rec, app.runs.children(run_id), cache, app.settings), run_id)

    @server.tool(
        name="rl_stop_training",
        description=descriptions.RL_STOP_TRAINING,
        **tool_face("Stop a run", read_only=False, destructive=True, idempotent=True, open_world=False),
    )
    @tool_errors
    async def rl_stop_training(run_id: RunId) -> RunStopped:
        was = app.runs.get(run_id).status
        rec = await app.runs.stop(run_id)
        return reports.stopped(rec, was)

    @server.tool(
        name="rl_get_results",
        description=descriptions.RL_GET_RESULTS,
        **tool_face("Get run results", read_only=True, destructive=False, idempotent=True, open_world=False),
    )
    @tool_errors
    async def rl_get_results(run_id: RunId) -> Annotated[CallToolResult, RunResults]:
        rec = app.runs.get(run_id)
        project = reports.wandb_project_logged(rec)
        wandb = await wandb_summary(rec.run_name, project, app.settings.environ) if project else None
        result = reports.results(rec, cache, wandb)
        content: list[TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource] = [
            TextContent(type="text", text=result.model_dump_json(indent=1))
        ]
        metrics = cache.metrics(rec)
        if metrics:
            from rl_mcp.plots import reward_loss_png  # matplotlib: imported on first use

            evals, validation = cache.evals(rec), cache.validation(rec)
            png = await anyio.to_thread.run_sync(
                lambda: reward_loss_png(metrics, evals=evals, validation=validation, title=rec.run_id)
            )
            content.append(ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"))
        content.extend(run_links(run_id))
        return CallToolResult(content=content, structured_content=result.model_dump(mode="json"))

    @server.tool(
        name="rl_list_runs",
        description=descriptions.RL_LIST_RUNS,
        **tool_face("List runs", read_only=True, destructive=False, idempotent=True, open_world=False),
    )
    @tool_errors
    def rl_list_runs(
        status: Annotated[Status | None, Field(description="Only runs with this status")] = None,
    ) -> RunList:
        runs = app.runs.list(status)
        return reports.run_list(runs, cache)
