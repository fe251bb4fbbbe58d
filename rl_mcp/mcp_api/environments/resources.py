"""The environments as resources: the listing, one environment's source, and one field of the selected
environment's config."""

from __future__ import annotations

import re

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from rl_mcp.app import AppContext
from rl_mcp.environments.answers import config_view, environment_list
from rl_mcp.errors import UserError
from rl_mcp.mcp_api.inputs import ENV_NAME_PATTERN, FIELD_NAME_PATTERN

CONFIG_FIELD_URI = "rl://config/{field}"
MAX_SOURCE_BYTES = 2_000_000


def register_environment_resources(server: MCPServer, app: AppContext) -> None:
    @server.resource(
        "rl://environments",
        name="environments",
        title="RL environments",
        description="The environments rl_list_environments reports, as JSON.",
        mime_type="application/json",
    )
    async def environments_resource() -> str:
        return environment_list(app.catalog(), app.session.state.environment).model_dump_json(indent=2)

    @server.resource(
        "rl://environments/{name}",
        name="environment-source",
        title="Environment source",
        description="The Python source of one environment (name as in rl_list_environments).",
        mime_type="text/x-python",
    )
    async def environment_source(name: str) -> str:
        if not re.fullmatch(ENV_NAME_PATTERN, name):
            raise ResourceError(f"invalid environment name {name!r}: expected letters, digits, '_', '.', ':', '-'")
        try:
            info = app.environment(name)  # the path comes from the catalog, never from the name
        except UserError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        with open(info.file, "rb") as fh:
            return fh.read(MAX_SOURCE_BYTES).decode(errors="replace")


def register_config_field(server: MCPServer, app: AppContext) -> None:
    @server.resource(
        CONFIG_FIELD_URI,
        name="config-field",
        title="Config field",
        description="One field of the selected environment's config (value, status, type, bounds, "
        "description), as rl_get_current_config shows it.",
        mime_type="application/json",
    )
    async def config_field(field: str) -> str:
        if not re.fullmatch(FIELD_NAME_PATTERN, field):
            raise ResourceError(f"invalid field name {field!r}")
        try:
            info, schema = await app.selected_schema()
        except UserError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        view = config_view(info, schema, app.settings.profile, app.session.state)
        for item in view.fields:
            if item.name == field:
                return item.model_dump_json(indent=1)
        raise ResourceNotFoundError(f"{info.name} has no config field {field!r} (see rl_get_current_config)")
