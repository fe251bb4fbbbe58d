"""The answers about environments, their config and the tool servers, built from the domain's objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rl_mcp.environments.discovery import Catalog
from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo
from rl_mcp.formats import FORMATS, SECTIONS
from rl_mcp.mcp_api.environments import descriptions
from rl_mcp.mcp_api.environments.answers import (
    ConfigField,
    ConfigView,
    EnvironmentList,
    EnvironmentSummary,
    ProfileInfo,
    ScanProblem,
    ShadowedEnvironment,
    TaskCatalog,
    ToolServerView,
    ToolView,
)
from rl_mcp.mcp_api.from_domain import answer_from
from rl_mcp.runs.reply_length import config_note
from rl_mcp.session.fields import constraints, resolve_field
from rl_mcp.session.state import SessionState
from rl_mcp.settings import BUNDLED_ENV_DIR, Profile
from rl_mcp.tool_servers.files import environment_name
from rl_mcp.tool_servers.listing import ServerTools


def environment_list(catalog: Catalog, selected: str | None) -> EnvironmentList:
    """The rl_list_environments answer; tasks by name only (106 full entries would bury the rest)."""
    listed = sorted(catalog.environments.values(), key=lambda e: e.name)
    catalogued = {e.name for e in listed if FORMATS[e.format].catalogued}
    hosts = {(e.file, e.class_name): e.name for e in listed if e.name not in catalogued}
    families: dict[tuple[Path, str], list[EnvironmentInfo]] = {}
    for e in listed:
        if e.name in catalogued:
            families.setdefault((e.file, e.class_name), []).append(e)
    return EnvironmentList(
        environments=[
            answer_from(EnvironmentSummary, e, file=str(e.file), bundled=e.env_dir == BUNDLED_ENV_DIR)
            for e in listed
            if e.name not in catalogued
        ],
        task_catalogs=[
            TaskCatalog(
                host=hosts.get(key, key[1]),
                format=members[0].format,
                description=f"{len(members)} tasks, each an environment: select one by its name",
                tasks=[m.name for m in members],
            )
            for key, members in families.items()
        ],
        selected=selected,
        shadowed=[ShadowedEnvironment(**s) for s in catalog.shadowed],
        errors=[ScanProblem(**e) for e in catalog.errors],
        env_dirs=[str(d) for d in catalog.env_dirs],
        next_step=descriptions.NEXT_AFTER_LIST,
    )


def config_view(info: EnvironmentInfo, schema: ConfigSchema, profile: Profile, state: SessionState) -> ConfigView:
    """The rl_get_current_config answer."""
    fields = []
    values: dict[str, dict[str, Any]] = {"env": {}, "trainer": {"base_model": profile.model}}
    values.update({section: {} for section in SECTIONS})
    for name, spec in schema.fields.items():
        value, status = resolve_field(schema, profile, state, name)
        values[spec.section][name] = value
        fields.append(
            answer_from(
                ConfigField,
                spec,
                value=value,
                description=spec.description or "",
                status=status,
                editable=status not in ("locked", "managed"),
                constraints=constraints(schema, name),
            )
        )
    return answer_from(
        ConfigView,
        schema,  # its config class
        state,  # its wandb name
        info,  # its format and class
        environment=info.name,
        file=str(info.file),
        profile=ProfileInfo(**profile.public()),
        fields=fields,
        edits=dict(state.edits),
        note=schema.training_error,
        generation_cap=config_note(values["env"], values["trainer"], profile.model),
        next_step=descriptions.NEXT_AFTER_CONFIG,
    )


def tool_server_views(listing: dict[str, ServerTools]) -> list[ToolServerView]:
    """The user's tool servers with their tools, as rl_list_environments shows them."""
    views = []
    for name, st in listing.items():
        allowed = st.allowed() if st.error is None else None
        views.append(
            ToolServerView(
                environment=environment_name(name),
                server=name,
                connection=st.spec.public() if st.spec is not None else None,
                tools=[
                    ToolView(
                        **t.to_json(),
                        enabled_by_default=allowed is not None and t.name in allowed.names,
                        destructive=t.destructive,
                    )
                    for t in st.tools
                ],
                default_tools=allowed.note if allowed is not None else "none: the server is not usable",
                error=st.error,
            )
        )
    return views
