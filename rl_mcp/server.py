"""Builds the MCP server: tools and resources as thin adapters over environments.py and session.py.

Each tool validates its input through its signature (pydantic Field bounds), calls a pure helper
and returns a pydantic model (structuredContent). Expected failures raise ToolError, which the
client sees as isError with a message that names the problem and the fix.
"""

from __future__ import annotations

import hmac
import json
import re
from typing import Annotated, Any

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from pydantic import Field

from . import descriptions, inference_test
from .descriptions import annotations
from .context import AppContext, NoSelection
from .environments import IntrospectionError, environment_list
from .models import ConfigView, EditResult, EnvironmentList, InferenceTestResult, SelectionResult
from .runs.tools import register_run_tools, subscription_bus
from .session import EditRejected, SessionSaveError, config_view, resolve_field

ENV_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
FIELD_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
MAX_SOURCE_BYTES = 2_000_000

EnvName = Annotated[
    str,
    Field(
        description="Environment name, as listed by rl_list_environments (e.g. 'gsm8k_tinker')",
        min_length=1,
        max_length=64,
        pattern=ENV_NAME_PATTERN,
    ),
]

NEXT_AFTER_LIST = "rl_select_environment(name) with one of these names."
NEXT_AFTER_CONFIG = (
    "rl_edit_config(field, value) for any editable field, then rl_test_inference to check the "
    "environment against real inference, then rl_start_training."
)
NEXT_AFTER_EDIT = "rl_get_current_config to review, or rl_test_inference / rl_start_training when ready."


class StaticTokenVerifier:
    """Accepts exactly one bearer token (compared in constant time)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token="***", client_id="rl-mcp", scopes=[])
        return None


def build_server(app: AppContext, *, public_url: str = "http://127.0.0.1") -> MCPServer:
    """The MCPServer with this package's tools and resources bound to `app`."""
    auth_kwargs: dict[str, Any] = {}
    if app.settings.auth_token:
        auth_kwargs = {
            "auth": AuthSettings(issuer_url=public_url, resource_server_url=None, required_scopes=[]),
            "token_verifier": StaticTokenVerifier(app.settings.auth_token),
        }
    server: MCPServer = MCPServer(
        "rl-mcp",
        title="RL training (Atropos + Tinker)",
        instructions=descriptions.INSTRUCTIONS,
        version=_version(),
        subscriptions=subscription_bus(app),
        **auth_kwargs,
    )
    _register_environment_tools(server, app)
    _register_resources(server, app)
    register_run_tools(server, app)
    _register_inference_test(server, app)
    return server


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rl-mcp")
    except PackageNotFoundError:
        return "0.0.0"


def _register_environment_tools(server: MCPServer, app: AppContext) -> None:
    @server.tool(
        name="rl_list_environments",
        description=descriptions.RL_LIST_ENVIRONMENTS,
        annotations=annotations("List RL environments", read_only=True, destructive=False, idempotent=True),
    )
    async def rl_list_environments() -> EnvironmentList:
        return environment_list(app.catalog(), app.session.state.environment, NEXT_AFTER_LIST)

    @server.tool(
        name="rl_select_environment",
        description=descriptions.RL_SELECT_ENVIRONMENT,
        annotations=annotations("Select an environment", read_only=False, destructive=True, idempotent=False),
    )
    async def rl_select_environment(name: EnvName, ctx: Context) -> SelectionResult:
        catalog = app.catalog()
        info = catalog.environments.get(name)
        if info is None:
            known = ", ".join(sorted(catalog.environments)) or "none found"
            raise ToolError(f"unknown environment {name!r}: known environments are {known} (see rl_list_environments)")
        fresh = app.introspector.cached(info) is None
        if fresh:  # seconds of importing in a child: tell clients that asked for progress
            await ctx.report_progress(0, 1, f"loading the config fields of {name} (imports it in a child process)")
        try:
            schema = await app.introspector.schema(info)
        except IntrospectionError as exc:
            raise ToolError(str(exc)) from exc
        if fresh:
            await ctx.report_progress(1, 1, f"loaded {len(schema.fields)} config fields")
        previous = app.session.state.environment
        try:
            state = app.session.select(info)
        except SessionSaveError as exc:
            raise ToolError(str(exc)) from exc
        view = config_view(info, schema, app.settings.profile, state, NEXT_AFTER_CONFIG)
        return SelectionResult(
            selected=info.name,
            previous=previous,
            wandb_name=state.wandb_name or "",
            config=view,
            next_step=NEXT_AFTER_CONFIG,
        )

    @server.tool(
        name="rl_get_current_config",
        description=descriptions.RL_GET_CURRENT_CONFIG,
        annotations=annotations("Show the current config", read_only=True, destructive=False, idempotent=True),
    )
    async def rl_get_current_config() -> ConfigView:
        info, schema = await _selected_schema(app)
        return config_view(info, schema, app.settings.profile, app.session.state, NEXT_AFTER_CONFIG)

    @server.tool(
        name="rl_edit_config",
        description=descriptions.RL_EDIT_CONFIG,
        annotations=annotations("Edit the config", read_only=False, destructive=True, idempotent=True),
    )
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
        info, schema = await _selected_schema(app)
        profile, session = app.settings.profile, app.session
        try:
            if reset:
                dropped = session.reset(field)
                current = resolve_field(schema, profile, session.state, field)[0] if field in schema.fields else None
                return EditResult(
                    environment=info.name,
                    action="reset" if field else "reset_all",
                    field=field,
                    value=current,
                    reset_fields=dropped,
                    edits=dict(session.state.edits),
                    next_step=NEXT_AFTER_EDIT,
                )
            if field is None:
                raise EditRejected("name the `field` to set (or pass reset=true to reset every edit)")
            previous = session.set_field(schema, profile, field, value)
        except (EditRejected, SessionSaveError) as exc:
            raise ToolError(str(exc)) from exc
        return EditResult(
            environment=info.name,
            action="set",
            field=field,
            previous=previous,
            value=resolve_field(schema, profile, session.state, field)[0],
            edits=dict(session.state.edits),
            next_step=NEXT_AFTER_EDIT,
        )


def _register_inference_test(server: MCPServer, app: AppContext) -> None:
    @server.tool(
        name="rl_test_inference",
        description=descriptions.RL_TEST_INFERENCE,
        annotations=annotations(
            "Test the environment against inference", read_only=False, destructive=False, idempotent=False
        ).model_copy(update={"open_world_hint": True}),
    )
    async def rl_test_inference(
        ctx: Context,
        # strict: a count given as a string is refused, not converted (each call starts real work)
        num_steps: Annotated[
            int, Field(strict=True, ge=1, le=100, description="Groups (steps) to score per model")
        ] = 3,
        group_size: Annotated[int, Field(strict=True, ge=1, le=64, description="Completions per group")] = 16,
        models: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=200)]] | None,
            Field(max_length=8, description="Model names; default: OpenRouter's three, or the local model"),
        ] = None,
        base_url: Annotated[
            str | None,
            Field(max_length=500, pattern=r"^https?://\S+$",
                  description="An OpenAI-compatible endpoint, e.g. http://host:8000/v1 (needs models)"),
        ] = None,
        api_key_env: Annotated[
            str | None,
            Field(max_length=100,  # checked in inference_test, whose errors never echo it (it may be a key)
                  description="NAME of the server-side environment variable holding the endpoint's key "
                  "(e.g. MY_API_KEY), never the key itself"),
        ] = None,
        timeout_s: Annotated[float, Field(ge=10, le=3600, description="Per-model time limit in seconds")] = 600,
    ) -> InferenceTestResult:
        try:
            return await inference_test.run_for_selection(
                app, num_steps=num_steps, group_size=group_size, models=models, base_url=base_url,
                api_key_env=api_key_env, timeout_s=timeout_s, progress=ctx.report_progress,
            )
        except (NoSelection, IntrospectionError, inference_test.InferenceTestError) as exc:
            raise ToolError(str(exc)) from exc


async def _selected_schema(app: AppContext):
    try:
        return await app.selected_schema()
    except (NoSelection, IntrospectionError) as exc:
        raise ToolError(str(exc)) from exc


def _register_resources(server: MCPServer, app: AppContext) -> None:
    @server.resource(
        "rl://environments",
        name="environments",
        title="RL environments",
        description="The environments rl_list_environments reports, as JSON.",
        mime_type="application/json",
    )
    async def environments_resource() -> str:
        listing = environment_list(app.catalog(), app.session.state.environment, NEXT_AFTER_LIST)
        return listing.model_dump_json(indent=2)

    @server.resource(
        "rl://environments/{name}",
        name="environment-source",
        title="Environment source",
        description="The Python source of one environment (name as in rl_list_environments).",
        mime_type="text/x-python",
    )
    async def environment_source(name: str) -> str:
        if not re.fullmatch(ENV_NAME_PATTERN, name):
            raise ResourceError(f"invalid environment name {name!r}: expected letters, digits, '_', '.', '-'")
        catalog = app.catalog()
        info = catalog.environments.get(name)
        if info is None:  # the path comes from the catalog, never from the name
            known = ", ".join(sorted(catalog.environments)) or "none found"
            raise ResourceNotFoundError(f"unknown environment {name!r}: known environments are {known}")
        data = info.file.read_bytes()[:MAX_SOURCE_BYTES]
        return data.decode(errors="replace")

    @server.resource(
        "rl://profile",
        name="profile",
        title="Operator profile",
        description="The active operator profile: backend, model, locked values and defaults.",
        mime_type="application/json",
    )
    async def profile_resource() -> str:
        return json.dumps(app.settings.profile.public(), indent=2)
