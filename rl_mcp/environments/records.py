"""What a scan finds and what introspection reads, as plain records: the environment, its config
fields. Formats (`rl_mcp/formats/`) fill them; nothing here knows one format from another."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rl_mcp.environments.packages.folder import PackageFolder
from rl_mcp.errors import UserError


class IntrospectionError(UserError):
    """The environment could not be imported or configured; the message ends with its traceback."""


@dataclass(frozen=True)
class EnvironmentInfo:
    """One environment as listed: the class (or file) that runs it and the format that found it."""

    name: str
    class_name: str
    file: Path
    env_dir: Path
    line: int
    description: str
    config_class: str
    format: str  # its format's name (rl_mcp/formats/)
    # the format's own record of what this environment runs (a task, a server, a module, a folder):
    # only its format reads it
    entry: Any = None
    package: PackageFolder | None = None  # an environment folder with a pyproject: installed before it runs


@dataclass(frozen=True)
class FieldSpec:
    """One config field as the child process reported it."""

    name: str
    # env and tinker: every run's; another: a format's own (rendered into the env key it names)
    section: str
    type: str
    default: Any
    description: str | None
    json_schema: dict[str, Any]


@dataclass(frozen=True)
class ConfigSchema:
    """An environment's config fields (env section) plus the editable training fields."""

    environment: str
    config_class: str
    fields: dict[str, FieldSpec]
    defs: dict[str, Any] = field(default_factory=dict)
    training_error: str | None = None
    # what its format sets in each run's env section (which task, server, file or folder it runs)
    run_source: dict[str, Any] = field(default_factory=dict)
    # a format's own sections: section -> the env key its edited fields go under as one mapping
    section_keys: dict[str, str] = field(default_factory=dict)

    def field_schema(self, name: str) -> dict[str, Any]:
        """A self-contained JSON schema for one field (with the model's $defs)."""
        spec = self.fields[name]
        return {**spec.json_schema, "$defs": self.defs} if self.defs else dict(spec.json_schema)

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "config_class": self.config_class,
            "fields": {n: asdict(f) for n, f in self.fields.items()},
            "defs": self.defs,
            "training_error": self.training_error,
        }

    def without(self, names: tuple[str, ...], **changes: Any) -> ConfigSchema:
        """The schema less the fields a run sets itself (`names`), with `changes` (its source)."""
        fields = {n: f for n, f in self.fields.items() if n not in names}
        return dataclasses.replace(self, fields=fields, **changes)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConfigSchema:
        return cls(
            environment=data["environment"],
            config_class=data["config_class"],
            fields={n: FieldSpec(**f) for n, f in data["fields"].items()},
            defs=data.get("defs") or {},
            training_error=data.get("training_error"),
        )
