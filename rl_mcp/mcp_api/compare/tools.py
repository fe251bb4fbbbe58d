"""rl_compare_runs: two to eight runs side by side, as structured content and one chart."""

from __future__ import annotations

import base64
from typing import Annotated

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import CallToolResult, ImageContent, TextContent
from pydantic import Field

from rl_mcp.app import AppContext
from rl_mcp.mcp_api.compare import descriptions
from rl_mcp.mcp_api.descriptions import tool_face
from rl_mcp.mcp_api.errors import tool_errors
from rl_mcp.mcp_api.inputs import RunId
from rl_mcp.mcp_api.run_view import run_view_meta
from rl_mcp.runs.compare import MAX_RUNS, MIN_RUNS, compare_runs
from rl_mcp.runs.compare_answers import CompareResult, compare_answer
from rl_mcp.runs.metrics import MetricsCache


def register_compare_tool(server: MCPServer, app: AppContext, cache: MetricsCache) -> None:
    @server.tool(
        name="rl_compare_runs",
        description=descriptions.RL_COMPARE_RUNS,
        **tool_face("Compare runs", read_only=True, destructive=False, idempotent=True, open_world=False),
        meta=run_view_meta(),
    )
    @tool_errors
    async def rl_compare_runs(
        run_ids: Annotated[
            list[RunId],
            Field(
                min_length=MIN_RUNS,
                max_length=MAX_RUNS,
                description="Two to eight run ids from rl_list_runs, each once; the chart and answer keep this order",
            ),
        ],
    ) -> Annotated[CallToolResult, CompareResult]:
        records = [app.runs.get(run_id) for run_id in run_ids]
        price = app.settings.profile.usd_per_million_tokens

        def compared() -> tuple[CompareResult, bytes]:  # reads every run's files, draws: off the event loop
            comparison = compare_runs(records, cache, usd_per_million_tokens=price)
            return compare_answer(comparison), comparison.chart_png()

        answer, png = await anyio.to_thread.run_sync(compared)
        return CallToolResult(
            content=[
                TextContent(type="text", text=answer.model_dump_json(indent=1)),
                ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png"),
            ],
            structured_content=answer.model_dump(mode="json"),
        )
