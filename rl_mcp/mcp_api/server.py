"""Builds the MCP server: every tool family's tools, resources and prompts, the shared resources and
subscriptions, bound to one app. The one list of what the server offers.

Each tool validates its input through its signature (pydantic Field bounds), calls the domain
and returns a pydantic model (structuredContent). The domain's UserErrors become ToolErrors,
which the client sees as isError with a message that names the problem and the fix.
"""

from __future__ import annotations

import hmac
from functools import partial
from typing import Any

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, GetPromptResult, InputRequiredResult
from pydantic import AnyHttpUrl

from rl_mcp.app import AppContext
from rl_mcp.distribution import installed_version
from rl_mcp.mcp_api import descriptions
from rl_mcp.mcp_api.compare.tools import register_compare_tool
from rl_mcp.mcp_api.environments.resources import register_config_field, register_environment_resources
from rl_mcp.mcp_api.environments.tools import register_environment_tools
from rl_mcp.mcp_api.export.tools import register_export_tool
from rl_mcp.mcp_api.guide.prompts import register_guide
from rl_mcp.mcp_api.inference.tools import register_inference_tool
from rl_mcp.mcp_api.notices import FindingNotices
from rl_mcp.mcp_api.resources import engine_files, register_server_resources
from rl_mcp.mcp_api.run_view import run_view_extension
from rl_mcp.mcp_api.runs.resources import register_run_resources
from rl_mcp.mcp_api.runs.tools import register_run_tools
from rl_mcp.mcp_api.serving.tools import register_serving_tools
from rl_mcp.mcp_api.sft.tools import register_sft_tool
from rl_mcp.mcp_api.spend import register_spend_gate
from rl_mcp.mcp_api.subscriptions import ResourcePublisher, install_legacy_subscriptions
from rl_mcp.mcp_api.tool_servers.tools import register_tool_server_tools
from rl_mcp.runs.metrics import MetricsCache


class StaticTokenVerifier:
    """Accepts exactly one bearer token (compared in constant time)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

    async def verify_token(self, token: str) -> AccessToken | None:
        if hmac.compare_digest(token.encode(), self._token):
            return AccessToken(token="***", client_id="rl-mcp", scopes=[])
        return None


class RLMCPServer(MCPServer[Any]):
    """MCPServer whose prompts/get answers a client's mistake (an unknown prompt, a missing argument) with
    -32602 and the reason, as MCP's server/prompts "Error Handling" asks: the SDK (mcp 2.3) raises a
    ValueError, which the client sees as "Internal server error" (2026-07-28) or as code 0 (2025-11-25)."""

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> GetPromptResult | InputRequiredResult:
        prompt = next((p for p in await self.list_prompts() if p.name == name), None)
        if prompt is None:
            raise MCPError(INVALID_PARAMS, f"Unknown prompt: {name}")
        given = arguments or {}
        if missing := [a.name for a in prompt.arguments or [] if a.required and a.name not in given]:
            raise MCPError(INVALID_PARAMS, f"Missing required arguments: {', '.join(missing)}")
        return await super().get_prompt(name, arguments, context)


def build_server(app: AppContext, *, public_url: str = "http://127.0.0.1") -> MCPServer:
    """The MCPServer with this package's tools and resources bound to `app`."""
    auth_kwargs: dict[str, Any] = {}
    if app.settings.auth_token:
        auth_kwargs = {
            "auth": AuthSettings(issuer_url=AnyHttpUrl(public_url), resource_server_url=None, required_scopes=[]),
            "token_verifier": StaticTokenVerifier(app.settings.auth_token),
        }
    publisher = ResourcePublisher(InMemorySubscriptionBus())
    server: MCPServer = RLMCPServer(
        "rl-mcp",
        title="RL training (Atropos + Tinker)",
        instructions=descriptions.INSTRUCTIONS,
        version=_version(),
        subscriptions=publisher.bus,
        extensions=[run_view_extension()],
        **auth_kwargs,
    )
    cache = MetricsCache()
    # in this order, which is the order clients list them in
    register_environment_tools(server, app)
    register_environment_resources(server, app)
    register_server_resources(server, app)
    register_run_tools(server, app, cache)
    register_run_resources(server, app, cache)
    register_inference_tool(server, app)
    register_sft_tool(server, app)
    register_export_tool(server, app)
    register_serving_tools(server, app)
    register_compare_tool(server, app, cache)
    register_config_field(server, app)
    register_guide(server, app)
    register_tool_server_tools(server, app)
    register_spend_gate(server, app)
    if app.runs_manager is not None:
        app.runs_manager.events.add_listener(publisher)
        app.task_group.start_soon(partial(publisher.run, app.runs_manager.supervised, other_files=engine_files(app)))
        app.task_group.start_soon(FindingNotices(publisher, cache).run, app.runs_manager.supervised)
        install_legacy_subscriptions(server, publisher)
    return server


def _version() -> str:
    return installed_version() or "0.0.0"
