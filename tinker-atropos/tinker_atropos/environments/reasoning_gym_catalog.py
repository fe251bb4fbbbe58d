"""reasoning-gym's tasks as a catalog the server reads without importing reasoning_gym.

Each task of the pinned `reasoning-gym` release (its `DATASETS` registry) with its description and
its generator's settings (the config dataclass's fields, less `seed` and `size`, which the
environment sets) as JSON-schema'd fields. The catalog is generated from the installed package and
shipped beside this file (`reasoning_gym_catalog.json`); `tests/test_reasoning_gym.py` fails when it
no longer matches the package. Regenerate it with
`python -m tinker_atropos.environments.reasoning_gym_catalog`.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import typing
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Any

from pydantic import PydanticSchemaGenerationError, TypeAdapter

CATALOG_FILE = Path(__file__).with_name("reasoning_gym_catalog.json")
PACKAGE = "reasoning-gym"
ENV_SET = frozenset({"seed", "size"})  # the environment's own: the train and eval sets' seeds and sizes


def task_settings(config_cls: type) -> dict[str, tuple[Any, Any]]:
    """A task generator's editable settings: name -> (type, default)."""
    hints = typing.get_type_hints(config_cls)
    out: dict[str, tuple[Any, Any]] = {}
    for f in dataclasses.fields(config_cls):
        if f.name in ENV_SET:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            continue  # required without a default: never the case in the pinned release
        out[f.name] = (hints.get(f.name, f.type), default)
    return out


def described_type(hint: Any, default: Any) -> Any:
    """The type a setting's values are checked as: its declared one, or its default's where the
    declared type does not hold the default (the pinned release has a tuple for `list[str]`, 0.2 for
    `int`, "x" for a tuple)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            TypeAdapter(hint).dump_python(default, mode="json")
            return hint
        except (PydanticSchemaGenerationError, UserWarning, TypeError, ValueError):
            return type(default)


def _field(task: str, hint: Any, default: Any) -> dict[str, Any]:
    """One setting as a catalog field (a type JSON cannot carry fails here, on regeneration)."""
    hint = described_type(hint, default)
    adapter = TypeAdapter(hint)
    schema = adapter.json_schema()
    value = adapter.dump_python(default, mode="json")
    schema.pop("title", None)
    return {
        "type": hint.__name__ if isinstance(hint, type) else str(hint).replace("typing.", ""),
        "default": value,
        "description": f"{task}'s generator setting (reasoning-gym)",
        "json_schema": {**schema, "default": value},
    }


def build_catalog() -> dict[str, Any]:
    from reasoning_gym.factory import DATASETS

    tasks: dict[str, Any] = {}
    for name in sorted(DATASETS):
        dataset_cls, config_cls = DATASETS[name][:2]
        doc = inspect.getdoc(dataset_cls) or ""
        tasks[name] = {
            "description": doc.splitlines()[0] if doc else f"reasoning-gym task {name}",
            "config_class": config_cls.__name__,
            "fields": {s: _field(name, *spec) for s, spec in task_settings(config_cls).items()},
        }
    return {"package": PACKAGE, "version": version(PACKAGE), "tasks": tasks}


def render(catalog: dict[str, Any]) -> str:
    return json.dumps(catalog, indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    catalog = build_catalog()
    CATALOG_FILE.write_text(render(catalog))
    print(f"wrote {CATALOG_FILE} ({len(catalog['tasks'])} tasks)", file=sys.stderr)
