"""What a 2026-era client offers its user beyond tools: the workflow as a prompt, and completions of
environment names, run ids, process names and config field names (the prompt's and rl://config/{field}'s)."""

from __future__ import annotations

import re
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    Completion,
    CompletionArgument,
    CompletionContext,
    PromptReference,
    ResourceTemplateReference,
)

from rl_mcp.app import AppContext
from rl_mcp.environments.records import ConfigSchema
from rl_mcp.errors import UserError
from rl_mcp.mcp_api.guide import descriptions
from rl_mcp.mcp_api.inputs import ENV_NAME_PATTERN
from tinker_atropos.run_files import ProcessName

WORKFLOW_PROMPT = "rl_workflow"
MAX_COMPLETIONS = 100


def _matching(values: list[str], prefix: str) -> Completion:
    hits = [v for v in values if v.lower().startswith(prefix.lower())]
    return Completion(values=hits[:MAX_COMPLETIONS], total=len(hits), has_more=len(hits) > MAX_COMPLETIONS)


def register_guide(server: MCPServer, app: AppContext) -> None:
    async def schema_of(environment: str | None) -> ConfigSchema | None:
        """The named environment's config fields, else the selected one's; None when unknown."""
        try:
            if environment and re.fullmatch(ENV_NAME_PATTERN, environment):
                return await app.introspector.schema(app.environment(environment))
            return (await app.selected_schema())[1]
        except UserError:
            return None

    @server.prompt(
        name=WORKFLOW_PROMPT,
        title="Train an environment with RL",
        description="Walks an agent through select -> configure -> test -> train -> watch -> results "
        "for one environment, with the calls to make and how often to check on the run.",
    )
    async def rl_workflow(environment: str, focus_field: str | None = None) -> str:
        # A bad argument is the client's error (-32602, MCP server/prompts "Error Handling"), with its reason:
        # any other exception reaches the client as "Internal server error" (2026-07-28) or as code 0
        # "Error rendering prompt" (2025-11-25), the reason dropped
        if not re.fullmatch(ENV_NAME_PATTERN, environment):
            raise MCPError(INVALID_PARAMS, f"invalid environment name {environment!r}")
        try:
            info = app.environment(environment)
        except UserError as exc:
            raise MCPError(INVALID_PARAMS, str(exc)) from exc
        profile = app.settings.profile
        return descriptions.workflow_prompt(
            environment=info.name,
            env_format=info.format,
            description=info.description,
            profile=profile.name,
            backend=profile.backend,
            paid=profile.spends_money,
            status_interval_s=app.settings.status_min_interval_s,
            focus_field=focus_field,
        )

    @server.completion()  # type: ignore[no-untyped-call, untyped-decorator]  # the SDK leaves it untyped
    async def complete(
        ref: PromptReference | ResourceTemplateReference,
        argument: CompletionArgument,
        context: CompletionContext | None,
    ) -> Completion | None:
        given: dict[str, Any] = (context.arguments if context else None) or {}
        name, prefix = argument.name, argument.value
        if name in ("environment", "name"):
            return _matching(sorted(app.catalog().environments), prefix)
        if name == "run_id":
            runs = app.runs_manager.list() if app.runs_manager is not None else []
            return _matching([r.run_id for r in runs], prefix)  # newest first
        if name == "process":
            return _matching([p.value for p in ProcessName], prefix)
        if name in ("field", "focus_field"):
            schema = await schema_of(given.get("environment") if isinstance(ref, PromptReference) else None)
            return _matching(sorted(schema.fields) if schema else [], prefix)
        return None
