"""Config fields: what an edit may be, and the value a run gets for each field.

Values are layered, lowest first: the environment's own `config_init()` defaults, the profile's
defaults, the agent's edits, then the profile's locked values and what the server sets per run
(ports, run directory).
"""

from __future__ import annotations

import difflib
import json
import re
from typing import Any, Literal

from rl_mcp.environments.records import ConfigSchema
from rl_mcp.session.state import EditRejected, Session, SessionState
from rl_mcp.settings import Profile

MAX_VALUE_BYTES = 4096
RUN_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Env fields the server fills in for each run: editing them would break the run's wiring.
MANAGED_FIELDS = {
    "rollout_server_url": "the run's own run-api port",
    "data_dir_to_save_evals": "the run's directory (eval.jsonl goes there)",
}
CONSTRAINT_KEYS = (
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "enum",
    "const",
)

Status = Literal["locked", "managed", "edited", "profile_default", "default", "selection"]


def describe_expected(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """`integer >= 1`, `one of 'a', 'b'`, `string or null`: what a field accepts, in words."""
    if "$ref" in schema:
        target = defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
        return describe_expected({**target, **{k: v for k, v in schema.items() if k != "$ref"}}, defs)
    if "anyOf" in schema:
        return " or ".join(describe_expected(s, defs) for s in schema["anyOf"])
    if "enum" in schema:
        return "one of " + ", ".join(repr(v) for v in schema["enum"])
    words = schema.get("type", "any value")
    if isinstance(words, list):
        words = " or ".join(words)
    bounds = [
        f"{op} {schema[key]}"
        for key, op in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("exclusiveMaximum", "<"))
        if key in schema
    ]
    if "minLength" in schema:
        bounds.append(f"at least {schema['minLength']} characters")
    if "maxLength" in schema:
        bounds.append(f"at most {schema['maxLength']} characters")
    if "pattern" in schema:
        bounds.append(f"matching {schema['pattern']}")
    return f"{words} {' and '.join(bounds)}".strip()


def constraints(schema: ConfigSchema, name: str) -> dict[str, Any]:
    """The bounds and allowed values of a field, flattened for display."""
    spec = schema.fields[name].json_schema
    out: dict[str, Any] = {}
    for sub in [spec, *spec.get("anyOf", [])]:
        if "$ref" in sub:
            sub = {**schema.defs.get(sub["$ref"].rsplit("/", 1)[-1], {}), **sub}
        if sub.get("type") == "null":
            out["nullable"] = True
        out.update({k: sub[k] for k in CONSTRAINT_KEYS if k in sub})
    return out


def editable_fields(schema: ConfigSchema, profile: Profile) -> list[str]:
    return sorted(n for n in schema.fields if n not in profile.locked_fields and n not in MANAGED_FIELDS)


def validate_edit(schema: ConfigSchema, profile: Profile, name: str, value: Any) -> Any:
    """The value to store, or EditRejected naming what is wrong and what would be accepted."""
    try:
        size = len(json.dumps(value))
    except (TypeError, ValueError):
        raise EditRejected(f"value for {name!r} is not plain JSON data") from None
    if size > MAX_VALUE_BYTES:
        raise EditRejected(
            f"value for {name!r} is too large: {size} bytes of JSON (at most {MAX_VALUE_BYTES}); "
            "config values are short settings, not data"
        )
    if name in profile.locked_fields:
        _, locked = profile.locked_fields[name]
        raise EditRejected(
            f"field {name!r} is locked by profile {profile.name!r} at {locked!r}; locked values come "
            "from the operator's profile (RL_MCP_PROFILE or --profile), not from edits"
        )
    if name in MANAGED_FIELDS:
        raise EditRejected(f"field {name!r} is set by the server for each run ({MANAGED_FIELDS[name]})")
    if name not in schema.fields:
        close = difflib.get_close_matches(name, list(schema.fields), n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise EditRejected(
            f"unknown field {name!r} for environment {schema.environment!r}.{hint} "
            f"Editable fields: {', '.join(editable_fields(schema, profile))}"
            + (f" ({schema.training_error})" if schema.training_error else "")
        )
    if name == "wandb_name" and not (isinstance(value, str) and RUN_NAME_PATTERN.match(value)):
        raise EditRejected(
            f"invalid value for 'wandb_name': expected a name matching {RUN_NAME_PATTERN.pattern} "
            f"(it also names the run and its checkpoints), got {value!r}"
        )
    from jsonschema import Draft202012Validator  # only needed on an edit: keeps start-up light

    field_schema = schema.field_schema(name)
    errors = sorted(Draft202012Validator(field_schema).iter_errors(value), key=lambda e: e.path)
    if errors:
        expected = describe_expected(schema.fields[name].json_schema, schema.defs)
        raise EditRejected(f"invalid value for {name!r}: expected {expected}, got {value!r} ({errors[0].message})")
    return value


def resolve_field(schema: ConfigSchema, profile: Profile, state: SessionState, name: str) -> tuple[Any, Status]:
    """The value a run would get for `name`, and where it comes from."""
    spec = schema.fields[name]
    if name in profile.locked_fields:
        return profile.locked_fields[name][1], "locked"
    if name in MANAGED_FIELDS:
        return None, "managed"
    if name == "wandb_name" and state.wandb_name:
        return state.wandb_name, "selection"
    if name in state.edits:
        return state.edits[name], "edited"
    if name in profile.defaults.get(spec.section, {}):
        return profile.defaults[spec.section][name], "profile_default"
    return spec.default, "default"


def effective_value(schema: ConfigSchema, profile: Profile, state: SessionState, name: str) -> Any:
    return resolve_field(schema, profile, state, name)[0] if name in schema.fields else None


def apply_edit(session: Session, schema: ConfigSchema, profile: Profile, name: str, value: Any) -> Any:
    """Validate and store one edit; returns the previous effective value."""
    clean = validate_edit(schema, profile, name, value)
    previous = effective_value(schema, profile, session.state, name)
    session.set_field(name, clean)
    return previous
