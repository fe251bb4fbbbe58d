"""rl_list_environments, rl_select_environment, rl_get_current_config, rl_edit_config."""

from __future__ import annotations

from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from rl_mcp.app import AppContext
from rl_mcp.environments.answers import (
    ConfigView,
    EditResult,
    EnvironmentList,
    SelectionResult,
    config_view,
    edited,
    environment_list,
    selected,
    tool_server_views,
)
from rl_mcp.formats import FORMATS
from rl_mcp.mcp_api.descriptions import tool_face
from rl_mcp.mcp_api.environments import descriptions
from rl_mcp.mcp_api.errors import tool_errors
from rl_mcp.mcp_api.inputs import FIELD_NAME_PATTERN, EnvName
from rl_mcp.mcp_api.progress import CallProgress
from rl_mcp.session.fields import apply_edit
from rl_mcp.session.state import EditRejected
from rl_mcp.tool_servers.files import names_a_server
from rl_mcp.tool_servers.listing import ToolServerError


def register_environment_tools(server: MCPServer, app: AppContext) -> None:
    @server.tool(
        name="rl_list_environments",
        description=descriptions.RL_LIST_ENVIRONMENTS,
        **tool_face("List RL environments", read_only=True, destructive=False, idempotent=True, open_world=True),
    )
    async def rl_list_environments() -> EnvironmentList:
        catalog = app.catalog()
        listed = environment_list(catalog, app.session.state.environment)
        if any(names_a_server(n) for n in catalog.environments):  # their tools, from a child process
            try:
                listed.tool_servers = tool_server_views(await app.tool_servers.listing())
            except ToolServerError:
                pass  # an unreadable file is already among `errors`
        listed.tool_servers_file = str(app.tool_servers.path)
        return listed

    @server.tool(
        name="rl_select_environment",
        description=descriptions.RL_SELECT_ENVIRONMENT,
        **tool_face("Select an environment", read_only=False, destructive=True, idempotent=False, open_world=True),
    )
    @tool_errors
    async def rl_select_environment(name: EnvName, ctx: Context) -> SelectionResult:
        info, progress = app.environment(name), CallProgress(ctx.report_progress)
        await app.training_runtime(progress.note)  # its config is read in a child there: made on first use
        if FORMATS[info.format].fields_of(info).package is not None:  # its fields are read in its venv
            # (a verifiers folder's are read from its file: it is installed at its first test or run)
            await app.runtime(info, progress.note)
        fresh = app.introspector.cached(info) is None
        loading = progress.phase()
        if fresh:  # seconds of importing in a child: tell clients that asked for progress
            await loading(0, 1, f"loading the config fields of {name} (in a child process)")
        schema = await app.introspector.schema(info)
        if fresh:
            await loading(1, 1, f"loaded {len(schema.fields)} config fields")
        previous = app.session.state.environment
        state = app.session.select(info)
        return selected(info, schema, app.settings.profile, state, previous)

    @server.tool(
        name="rl_get_current_config",
        description=descriptions.RL_GET_CURRENT_CONFIG,
        **tool_face("Show the current config", read_only=True, destructive=False, idempotent=True, open_world=False),
    )
    @tool_errors
    async def rl_get_current_config() -> ConfigView:
        info, schema = await app.selected_schema()
        return config_view(info, schema, app.settings.profile, app.session.state)

    @server.tool(
        name="rl_edit_config",
        description=descriptions.RL_EDIT_CONFIG,
        **tool_face("Edit the config", read_only=False, destructive=True, idempotent=True, open_world=False),
    )
    @tool_errors
    async def rl_edit_config(
        field: Annotated[
            str | None,
            Field(
                description="The config field to set or reset (see rl_get_current_config); "
                "omit with reset=true to reset every edit",
                max_length=64,
                pattern=FIELD_NAME_PATTERN,
            ),
        ] = None,
        value: Annotated[
            Any,
            Field(description="The new value (JSON: number, string, boolean, null, list or object)"),
        ] = None,
        reset: Annotated[
            bool, Field(description="true: remove the edit of `field` (or of every field) instead of setting it")
        ] = False,
    ) -> EditResult:
        info, schema = await app.selected_schema()
        profile, session = app.settings.profile, app.session
        if reset:
            dropped = session.reset(field)
            return edited(info, schema, profile, session.state, field, reset_fields=dropped)
        if field is None:
            raise EditRejected("name the `field` to set (or pass reset=true to reset every edit)")
        previous = apply_edit(session, schema, profile, field, value)
        return edited(info, schema, profile, session.state, field, previous=previous)
