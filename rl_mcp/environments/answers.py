"""The environment tools' answers (the listing, a selection, the config and its edits) and their next
steps, read from the catalog, the session and the formats' schemas by attribute."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from rl_mcp.environments.discovery import Catalog
from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo
from rl_mcp.formats import FORMATS, NAMES, SECTIONS, described
from rl_mcp.from_domain import answer_from
from rl_mcp.runs.reply_length import config_note
from rl_mcp.session.fields import constraints, resolve_field
from rl_mcp.session.state import SessionState
from rl_mcp.settings import BUNDLED_ENV_DIR, Profile
from rl_mcp.tool_servers.files import environment_name
from rl_mcp.tool_servers.listing import ServerTools

EnvFormat = Literal[NAMES]  # type: ignore[valid-type]  # the registry's: rl_mcp/formats/
SectionName = Literal[("env", "trainer", *SECTIONS)]  # type: ignore[valid-type]


class EnvironmentSummary(BaseModel):
    name: str = Field(description="The name to pass to rl_select_environment")
    class_name: str = Field(description="The BaseEnv subclass (verifiers: `load_environment`)")
    file: str = Field(description="The Python file that defines it")
    description: str = Field(description="First line of the class docstring")
    config_class: str = Field(
        description="Its config class (a BaseEnvConfig subclass; verifiers: `load_environment` for its "
        "arguments, or its v1 EnvConfig class)"
    )
    bundled: bool = Field(description="True for environments shipped with rl-mcp, false for RL_MCP_ENV_DIRS")
    format: EnvFormat = Field(description=described())


class ShadowedEnvironment(BaseModel):
    name: str
    file: str
    class_name: str
    shadowed_by: str = Field(description="file:class that owns the name (the first found wins)")


class ScanProblem(BaseModel):
    file: str
    error: str


class TaskCatalog(BaseModel):
    """A family of environments listed by name only: every task runs one host environment."""

    host: str = Field(description="The environment that runs every task (listed in `environments`)")
    format: EnvFormat = Field(description="As in `environments`")
    description: str
    tasks: list[str] = Field(description="Each one an environment name for rl_select_environment")


class ToolView(BaseModel):
    name: str
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any] = Field(description="As the server annotates it (readOnlyHint, destructiveHint, ...)")
    enabled_by_default: bool = Field(description="In the default allow-list (annotated read-only)")
    destructive: bool = Field(description="May change or delete data: enabled only when `tools` names it")


class ToolServerView(BaseModel):
    environment: str = Field(description="The environment name, mcp:<server>, for rl_select_environment")
    server: str
    connection: dict[str, Any] | None = Field(
        description="transport, command and args or url, and the NAMES of its env variables and headers"
    )
    tools: list[ToolView] = Field(description="From the server's own tools/list")
    default_tools: str = Field(description="What the default allow-list is, and why")
    error: str | None = Field(description="Why the server could not be started or listed (with its stderr tail)")


class EnvironmentList(BaseModel):
    environments: list[EnvironmentSummary] = Field(description="Every environment but the tasks of `task_catalogs`")
    task_catalogs: list[TaskCatalog] = Field(
        default_factory=list, description="Task families, by name (reasoning-gym: reasoning_gym:<task>)"
    )
    selected: str | None = Field(description="The currently selected environment, if any")
    shadowed: list[ShadowedEnvironment] = Field(description="Duplicate names that were not used")
    errors: list[ScanProblem] = Field(description="Files that could not be parsed (they are skipped)")
    env_dirs: list[str] = Field(description="Directories scanned, in priority order")
    tool_servers: list[ToolServerView] = Field(
        default_factory=list, description="The MCP tool servers (environments mcp:<server>), each with its tools"
    )
    tool_servers_file: str | None = Field(default=None, description="Where they are configured (mcpServers JSON)")
    next_step: str


class ProfileInfo(BaseModel):
    name: str
    backend: Literal["tinker", "local"]
    model: str = Field(description="Base model trained with LoRA")
    description: str
    source: str = Field(description="The profile file")
    requires_env: list[str] = Field(description="Environment variables the profile needs (names only)")
    locked: dict[str, dict[str, Any]] = Field(description="Locked values per section (env, trainer)")
    defaults: dict[str, dict[str, Any]] = Field(description="The profile's starting values (editable)")


class ConfigField(BaseModel):
    name: str
    section: SectionName = Field(
        description="env: the environment's config; trainer: training; "
        + "; ".join(f"{name}: {summary}" for name, summary in SECTIONS.items())
    )
    type: str
    value: Any = Field(description="What a run started now would use")
    default: Any = Field(description="The environment's (or trainer's) own default")
    description: str = Field(description="The field's own documentation (empty when it has none)")
    status: Literal["locked", "managed", "edited", "profile_default", "default", "selection"] = Field(
        description="locked: from the profile, not editable; managed: set per run by the server; "
        "edited: your edit; profile_default / default: not edited; selection: set when selected"
    )
    editable: bool
    constraints: dict[str, Any] = Field(description="Bounds and allowed values (minimum, enum, nullable, ...)")


class ConfigView(BaseModel):
    environment: str
    format: EnvFormat = Field(description="As in rl_list_environments")
    file: str
    class_name: str
    config_class: str
    wandb_name: str | None = Field(description="W&B and run name; set on selection as {env}-{timestamp}")
    profile: ProfileInfo
    fields: list[ConfigField]
    edits: dict[str, Any] = Field(description="Your edits only (field -> value)")
    note: str | None = Field(default=None, description="Anything missing from this view and why")
    generation_cap: str | None = Field(
        default=None,
        description="Where a field asks for more tokens a reply than the model's context: the per-turn cap "
        "(max_reply_tokens) the inference server applies instead",
    )
    next_step: str


class SelectionResult(BaseModel):
    selected: str
    previous: str | None = Field(description="The environment selected before (its edits were cleared)")
    wandb_name: str
    config: ConfigView
    next_step: str


class EditResult(BaseModel):
    environment: str
    action: Literal["set", "reset", "reset_all"]
    field: str | None = Field(description="The field set or reset (null for reset_all)")
    previous: Any = Field(default=None, description="The value before this edit")
    value: Any = Field(default=None, description="The value a run would now use")
    reset_fields: list[str] = Field(default_factory=list, description="Edits removed by a reset")
    edits: dict[str, Any] = Field(description="All your edits after this call")
    next_step: str


NEXT_AFTER_LIST = "rl_select_environment(name) with one of these names."
NEXT_AFTER_CONFIG = (
    "rl_edit_config(field, value) for any editable field, then rl_test_inference to check the "
    "environment against real inference, then rl_start_training."
)
NEXT_AFTER_EDIT = "rl_get_current_config to review, or rl_test_inference / rl_start_training when ready."


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
        next_step=NEXT_AFTER_LIST,
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
        next_step=NEXT_AFTER_CONFIG,
    )


def selected(
    info: EnvironmentInfo, schema: ConfigSchema, profile: Profile, state: SessionState, previous: str | None
) -> SelectionResult:
    """The selection of `info` (the environment selected before: `previous`), its config as a run would use it."""
    return SelectionResult(
        selected=info.name,
        previous=previous,
        wandb_name=state.wandb_name or "",
        config=config_view(info, schema, profile, state),
        next_step=NEXT_AFTER_CONFIG,
    )


def edited(
    info: EnvironmentInfo,
    schema: ConfigSchema,
    profile: Profile,
    state: SessionState,
    field: str | None,
    *,
    previous: Any = None,
    reset_fields: list[str] | None = None,
) -> EditResult:
    """An edit of `field` just made (`reset_fields` given: a reset, of every edit when `field` is None),
    with the value a run would now use."""
    action: Literal["set", "reset", "reset_all"] = "set"
    if reset_fields is not None:
        action = "reset" if field else "reset_all"
    value = resolve_field(schema, profile, state, field)[0] if field in schema.fields else None
    return EditResult(
        environment=info.name,
        action=action,
        field=field,
        previous=previous,
        value=value,
        reset_fields=reset_fields or [],
        edits=dict(state.edits),
        next_step=NEXT_AFTER_EDIT,
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
