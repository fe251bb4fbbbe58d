"""The environment tools' answer models (outputSchema + structuredContent): the listing with its tool
servers, the config view, a selection and an edit."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from rl_mcp.formats import NAMES, SECTIONS, described

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
