"""The agent's session: the selected environment, its edits, and the run config built from them.

Values are layered, lowest first: the environment's own `config_init()` defaults, the profile's
defaults, the agent's edits, then the profile's locked values and what the server sets per run
(ports, run directory). The state (selection + edits) is persisted atomically in the state dir,
so a restarted server keeps it. `render_run_config` / `write_run_config` produce the run YAML of
docs/run-files.md; rl_start_training and rl_test_inference both use them.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import yaml

from .environments import ConfigSchema, EnvironmentInfo, atomic_write_text
from .settings import Profile

MAX_VALUE_BYTES = 4096
LOCAL_API_KEY = "local"  # our own inference server: never a real secret
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


class EditRejected(ValueError):
    """An edit that was not stored; the message names the problem and the fix."""


class SessionSaveError(OSError):
    """The session file could not be written; the session in memory is unchanged."""


@dataclass
class SessionState:
    """What persists in state.json."""

    environment: str | None = None
    env_file: str | None = None
    env_class: str | None = None
    wandb_name: str | None = None
    selected_at: str | None = None
    edits: dict[str, Any] = field(default_factory=dict)


def wandb_name_for(environment: str, now: datetime | None = None) -> str:
    """`{env}-{timestamp}`: unique per selection, valid as a W&B and trainer run name."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    return f"{environment}-{stamp}"


class Session:
    """The selection and edits, persisted in `path` after every change."""

    def __init__(self, path: Path, state: SessionState | None = None) -> None:
        self.path = path
        self.state = state or SessionState()

    @classmethod
    def load(cls, path: Path) -> Session:
        """The saved session, or an empty one when there is none (or it is unreadable)."""
        try:
            data = json.loads(path.read_text())
            state = SessionState(**{k: v for k, v in data.items() if k in SessionState.__dataclass_fields__})
            if not isinstance(state.edits, dict):
                state.edits = {}
        except (OSError, ValueError, TypeError):
            state = SessionState()
        return cls(path, state)

    def save(self) -> None:
        try:
            atomic_write_text(self.path, json.dumps(asdict(self.state), indent=2, sort_keys=True))
        except OSError as exc:
            raise SessionSaveError(
                f"could not save the session to {self.path} ({exc.strerror or exc}); nothing was changed. "
                "Check that the state dir (RL_MCP_HOME) is writable and has space, then try again"
            ) from exc

    def _commit(self, new_state: SessionState) -> None:
        """Persist first, then swap: a failed write leaves memory and disk as they were."""
        previous, self.state = self.state, new_state
        try:
            self.save()
        except BaseException:
            self.state = previous
            raise

    def select(self, info: EnvironmentInfo, now: datetime | None = None) -> SessionState:
        """Select `info`: a fresh wandb_name, and edits cleared (fields differ between envs)."""
        self._commit(
            SessionState(
                environment=info.name,
                env_file=str(info.file),
                env_class=info.class_name,
                wandb_name=wandb_name_for(info.name, now),
                selected_at=(now or datetime.now(timezone.utc)).isoformat(timespec="seconds"),
                edits={},
            )
        )
        return self.state

    def set_field(self, schema: ConfigSchema, profile: Profile, name: str, value: Any) -> Any:
        """Validate and store one edit; returns the previous effective value."""
        clean = validate_edit(schema, profile, name, value)
        previous = effective_value(schema, profile, self.state, name)
        new_state = copy.deepcopy(self.state)
        if name == "wandb_name":
            new_state.wandb_name = clean
        else:
            new_state.edits[name] = clean
        self._commit(new_state)
        return previous

    def reset(self, name: str | None = None) -> list[str]:
        """Drop one edit, or all of them; returns the fields that were reset."""
        new_state = copy.deepcopy(self.state)
        if name is None:
            dropped = sorted(new_state.edits)
            new_state.edits = {}
        elif name in new_state.edits:
            dropped = [name]
            del new_state.edits[name]
        else:
            edited = ", ".join(sorted(self.state.edits)) or "none"
            raise EditRejected(f"field {name!r} has no edit to reset (edited fields: {edited})")
        self._commit(new_state)
        return dropped


# --- validation -------------------------------------------------------------------------------


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
        raise EditRejected(
            f"invalid value for {name!r}: expected {expected}, got {value!r} ({errors[0].message})"
        )
    return value


# --- the effective config ---------------------------------------------------------------------


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


def render_run_config(
    *,
    profile: Profile,
    schema: ConfigSchema,
    state: SessionState,
    api_port: int,
    inference_port: int,
    run_dir: Path,
    run_name: str | None = None,
) -> dict[str, Any]:
    """The run YAML of docs/run-files.md as a dict: never holds a secret."""
    run_dir = Path(run_dir).resolve()
    name = run_name or state.wandb_name or wandb_name_for(schema.environment)
    values = {n: resolve_field(schema, profile, state, n) for n in schema.fields}
    env = {n: v for n, (v, status) in values.items() if schema.fields[n].section == "env" and status != "managed"}
    env.update(
        tokenizer_name=profile.tokenizer_name,
        rollout_server_url=f"http://127.0.0.1:{api_port}",
        data_dir_to_save_evals=str(run_dir),
        wandb_name=name,
    )
    tinker: dict[str, Any] = {**profile.defaults["tinker"], **profile.locked["tinker"]}
    tinker.update({n: v for n, (v, _) in values.items() if schema.fields[n].section == "tinker"})
    tinker.update(
        backend=profile.backend,
        base_model=profile.model,
        total_steps=env["total_steps"],
        api_url=env["rollout_server_url"],
        inference_host="127.0.0.1",
        inference_port=inference_port,
        run_dir=str(run_dir),
        run_name=name,
        use_wandb=bool(env.get("use_wandb", False)),
    )
    server = {k: v for k, v in profile.inference.items() if k != "api_key"}
    server.update(
        model_name=profile.model,
        base_url=f"http://127.0.0.1:{inference_port}/v1",
        api_key=LOCAL_API_KEY,
        tokenizer_name=profile.tokenizer_name,
    )
    server.setdefault("server_type", "sglang")
    return {"env": env, "openai": [server], "tinker": tinker, "slurm": False, "testing": False}


def write_run_config(path: Path, config: dict[str, Any]) -> Path:
    """Write the run YAML atomically (readers never see half a file)."""
    atomic_write_text(Path(path), yaml.safe_dump(config, sort_keys=False))
    return Path(path)


# --- views ------------------------------------------------------------------------------------


def config_view(info: EnvironmentInfo, schema: ConfigSchema, profile: Profile, state: SessionState, next_step: str):
    """The rl_get_current_config answer."""
    from .models import ConfigField, ConfigView, ProfileInfo

    fields = []
    for name, spec in schema.fields.items():
        value, status = resolve_field(schema, profile, state, name)
        fields.append(
            ConfigField(
                name=name,
                section=spec.section,  # type: ignore[arg-type]
                type=spec.type,
                value=value,
                default=spec.default,
                description=spec.description or "",
                status=status,
                editable=status not in ("locked", "managed"),
                constraints=constraints(schema, name),
            )
        )
    return ConfigView(
        environment=info.name,
        file=str(info.file),
        class_name=info.class_name,
        config_class=schema.config_class,
        wandb_name=state.wandb_name,
        profile=ProfileInfo(**profile.public()),
        fields=fields,
        edits=dict(state.edits),
        note=schema.training_error,
        next_step=next_step,
    )
