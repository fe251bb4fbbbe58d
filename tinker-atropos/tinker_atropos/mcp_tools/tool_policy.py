"""Which of a server's tools a rollout may call: the `tools` allow-list against the annotations.

A tool annotated `destructiveHint: true` (and, as MCP's defaults say, any tool not annotated
read-only or non-destructive) is enabled only when `tools` names it. With no `tools`, the default is
the tools annotated `readOnlyHint: true`; a server that annotates none gets no tool at all, with a
message saying so. Standard library only: the server shows the same answer in its listing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

ALL = "*"  # in `tools`: every tool that is not (possibly) destructive


class ToolPolicyError(ValueError):
    """A `tools` entry or a task names a tool the server lacks, or one that may not be enabled implicitly."""


@dataclass(frozen=True)
class ToolInfo:
    """One tool as `tools/list` gave it."""

    name: str
    description: str = ""
    input_schema: dict[str, Any] = field(default_factory=dict)
    annotations: dict[str, Any] = field(default_factory=dict)

    @property
    def read_only(self) -> bool:
        return self.annotations.get("readOnlyHint") is True

    @property
    def destructive(self) -> bool:
        """MCP's reading: destructive unless read-only or annotated `destructiveHint: false`."""
        return not self.read_only and self.annotations.get("destructiveHint") is not False

    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema the chat template renders."""
        params = self.input_schema or {"type": "object", "properties": {}}
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "annotations": self.annotations,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolInfo:
        return cls(
            name=data["name"],
            description=data.get("description") or "",
            input_schema=data.get("input_schema") or {},
            annotations=data.get("annotations") or {},
        )


@dataclass(frozen=True)
class Allowed:
    """The enabled tools, in the server's order, and what the user should know about the choice."""

    names: tuple[str, ...]
    note: str


def _unknown(names: Iterable[str], tools: Sequence[ToolInfo], server: str) -> None:
    have = {t.name for t in tools}
    missing = [n for n in names if n != ALL and n not in have]
    if missing:
        raise ToolPolicyError(
            f"`tools` names {missing}, which server {server!r} does not have; its tools: "
            f"{', '.join(sorted(have)) or 'none'}"
        )


def allowed_tools(tools: Sequence[ToolInfo], requested: Sequence[str] | None, server: str) -> Allowed:
    """The allow-list for `requested` (None: the default), or ToolPolicyError for an unknown name."""
    if requested is not None:
        _unknown(requested, tools, server)
        named = set(requested)
        wildcard = ALL in named
        names = tuple(t.name for t in tools if t.name in named or (wildcard and not t.destructive))
        held = [t.name for t in tools if wildcard and t.destructive and t.name not in named]
        note = f"enabled as `tools` says: {', '.join(names) or 'none'}"
        if held:
            note += f"; not enabled by '*' (destructive or not annotated safe; name them to allow): {', '.join(held)}"
        return Allowed(names, note)
    names = tuple(t.name for t in tools if t.read_only)
    if names:
        others = [t.name for t in tools if not t.read_only]
        note = f"default: the tools annotated read-only ({', '.join(names)})"
        return Allowed(
            names, note + (f"; name others in `tools` to enable them: {', '.join(others)}" if others else "")
        )
    if not tools:
        return Allowed((), f"server {server!r} lists no tools")
    return Allowed(
        (),
        f"server {server!r} annotates none of its tools read-only, so none is enabled by default: "
        f"list the ones a rollout may call in `tools` (its tools: {', '.join(t.name for t in tools)})",
    )


def refuse_unenabled(needed: Iterable[str], tools: Sequence[ToolInfo], allowed: Allowed, server: str) -> None:
    """ToolPolicyError when a task (or check) relies on a tool the allow-list does not enable:
    a destructive one is named as such, never enabled for it."""
    by_name = {t.name: t for t in tools}
    for name in needed:
        if name not in by_name:
            raise ToolPolicyError(
                f"tool {name!r} is not a tool of server {server!r}; its tools: {', '.join(sorted(by_name)) or 'none'}"
            )
        if name in allowed.names:
            continue
        if by_name[name].destructive:
            raise ToolPolicyError(
                f"tool {name!r} of server {server!r} may change or delete data (destructiveHint, or not "
                "annotated read-only): it is never enabled implicitly. Name it in the `tools` field to allow it, "
                "or change the task"
            )
        raise ToolPolicyError(f"tool {name!r} is not enabled ({allowed.note}): add it to the `tools` field")
