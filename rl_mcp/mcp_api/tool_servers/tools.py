"""rl_write_mcp_tasks: tasks an agent writes for one of the user's MCP tool servers, checked and saved."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from pydantic import Field

from rl_mcp.app import AppContext
from rl_mcp.mcp_api.descriptions import tool_face
from rl_mcp.mcp_api.errors import tool_errors
from rl_mcp.mcp_api.tool_servers.descriptions import RL_WRITE_MCP_TASKS
from rl_mcp.tool_servers.answers import NEXT_AFTER_TASKS, TasksSaved
from rl_mcp.tool_servers.task_writing import save_tasks


def register_tool_server_tools(server: MCPServer, app: AppContext) -> None:
    @server.tool(
        name="rl_write_mcp_tasks",
        description=RL_WRITE_MCP_TASKS,
        **tool_face(
            "Write tasks for a tool server", read_only=False, destructive=True, idempotent=True, open_world=True
        ),
    )
    @tool_errors
    async def rl_write_mcp_tasks(
        server: Annotated[
            str,
            Field(
                description="The tool server's name (mcp:<server> without mcp:)",
                pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,49}$",
            ),
        ],
        tasks: Annotated[
            list[dict[str, Any]], Field(description="Tasks: {prompt, answer?, check, split?, id?}", max_length=5000)
        ],
        tools: Annotated[
            list[str] | None,
            Field(description="The allow-list the run will use; omit for the default (read-only tools)"),
        ] = None,
        mode: Annotated[
            Literal["replace", "append"], Field(description="Replace the saved tasks, or add to them")
        ] = "replace",
        eval_fraction: Annotated[float, Field(ge=0.0, lt=1.0, description="Share held out for evaluation")] = 0.25,
    ) -> TasksSaved:
        found = await app.tool_servers.server(server)
        saved = save_tasks(app.settings.home, found, tasks, tools=tools, mode=mode, eval_fraction=eval_fraction)
        return TasksSaved(
            server=server,
            path=str(saved.path),
            tasks=saved.tasks,
            added=saved.added,
            train=saved.train,
            eval=saved.eval,
            tools_checked=saved.tools_checked,
            allow_list=saved.allowed_note,
            next_step=NEXT_AFTER_TASKS.format(server=server),
        )
