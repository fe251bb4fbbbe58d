"""Answer models of the `mcp` format: each tool server with its tools in the listing, saved tasks."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


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


class TasksSaved(BaseModel):
    server: str
    path: str = Field(description="The JSONL file (the user may read and edit it)")
    tasks: int = Field(description="Tasks in the file now")
    added: int = Field(description="Tasks given in this call")
    train: int
    eval: int = Field(description="Held out for evaluation (eval_fraction, or the tasks' own `split`)")
    tools_checked: list[str] = Field(description="The tools the checks name")
    allow_list: str = Field(description="The tools a run with this `tools` may call")
    next_step: str
