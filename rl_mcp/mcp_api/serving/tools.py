"""rl_serve_model, rl_list_served_models, rl_stop_served_model: a run's weights on a loopback endpoint."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from rl_mcp.app import AppContext
from rl_mcp.mcp_api.descriptions import tool_face
from rl_mcp.mcp_api.errors import tool_errors
from rl_mcp.mcp_api.inputs import RunCheckpointChoice, RunId, ServedModelName
from rl_mcp.mcp_api.progress import CallProgress
from rl_mcp.mcp_api.serving import descriptions
from rl_mcp.serving.answers import ServedList, ServeResult, ServeStopped, serve_answer, served_list, stopped_answer


def register_serving_tools(server: MCPServer, app: AppContext) -> None:
    @server.tool(
        name="rl_serve_model",
        description=descriptions.RL_SERVE_MODEL,
        **tool_face("Serve a trained model", read_only=False, destructive=False, idempotent=True, open_world=True),
    )
    @tool_errors
    async def rl_serve_model(
        ctx: Context,
        run_id: RunId,
        weights: RunCheckpointChoice = None,
        port: Annotated[
            int | None,
            Field(strict=True, ge=1024, le=65535, description="The loopback port to serve on; default: a free one"),
        ] = None,
    ) -> ServeResult:
        progress = CallProgress(ctx.report_progress)
        serving = app.serving  # before the runtime: a server without the run registry says so at once
        await app.training_runtime(progress.note)  # the server's child runs there: made on first use
        plan = serving.plan(run_id, weights)
        async with app.engine_hold(plan.weights.engine_url, progress.note):  # a self-hosted run's engine, up
            served = await serving.serve(plan, port=port, report=progress.note)
        return serve_answer(served)

    @server.tool(
        name="rl_list_served_models",
        description=descriptions.RL_LIST_SERVED_MODELS,
        **tool_face("List served models", read_only=True, destructive=False, idempotent=True, open_world=False),
    )
    @tool_errors
    async def rl_list_served_models() -> ServedList:
        return served_list(app.serving.list())

    @server.tool(
        name="rl_stop_served_model",
        description=descriptions.RL_STOP_SERVED_MODEL,
        **tool_face("Stop a served model", read_only=False, destructive=True, idempotent=True, open_world=False),
    )
    @tool_errors
    async def rl_stop_served_model(model: ServedModelName) -> ServeStopped:
        return stopped_answer(await app.serving.stop(model))
