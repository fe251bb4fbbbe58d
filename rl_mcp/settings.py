"""Where things live and who the operator is: paths, env dirs, the active profile, the auth token.

Everything comes from environment variables and CLI flags, read once at start-up. The profile is
the operator's choice of backend and the values an agent may not change (its `locked` fields).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

import tinker_atropos
from rl_mcp.errors import UserError
from tinker_atropos.run_files import OLD_TRAINER_SECTION, TRAINER_SECTION, with_trainer_section
from tinker_atropos.venvs import training_python

PACKAGE_DIR = Path(__file__).resolve().parent
PROFILES_DIR = PACKAGE_DIR / "profiles"
# The trainer's package as installed beside this one (a wheel's site-packages, or a checkout): its
# bundled environments and the files children run are found there, never through a checkout.
TRAINER_PACKAGE_DIR = Path(tinker_atropos.__file__).resolve().parent
BUNDLED_ENV_DIR = TRAINER_PACKAGE_DIR / "environments"
TRAINER_ENTRY = ("-m", "tinker_atropos.trainer.launch")
SECTIONS = ("env", "trainer")


class SettingsError(UserError):
    """A configuration problem the operator must fix (bad profile, bad env var)."""


# Secrets the server may hold. Child processes get them only by name, where their job needs one.
SECRET_ENV_VARS = (
    "TINKER_API_KEY",
    "TINKER_ENGINE_API_KEY",  # a self-hosted Tinker engine's own key, where it checks one
    "WANDB_API_KEY",
    "OPENROUTER_API_KEY",
    "RL_MCP_AUTH_TOKEN",
    "HF_TOKEN",
)


# A value that is exactly an unexpanded `${NAME}` (or Cursor-style `${env:NAME}`): what an MCP client
# such as Hermes leaves in place of a variable it could not resolve. Treated as unset.
_PLACEHOLDER = re.compile(r"^\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}$")
_warned_placeholders: set[str] = set()
_log = logging.getLogger("rl_mcp")


def unexpanded_placeholders(environ: Mapping[str, str]) -> list[str]:
    """Names of the variables whose value is exactly an unexpanded `${NAME}` (never their values)."""
    return sorted(k for k, v in environ.items() if _PLACEHOLDER.match(v.strip()))


def without_placeholders(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without the variables that hold only an unexpanded `${NAME}`; each one is warned
    about once per process, on stderr (logging), by name only."""
    names = unexpanded_placeholders(environ)
    for name in names:
        if name not in _warned_placeholders:
            _warned_placeholders.add(name)
            _log.warning(
                "%s is an unexpanded ${...} placeholder (the MCP client found no value for it): treated as unset",
                name,
            )
    return {k: v for k, v in environ.items() if k not in names}


def without_secrets(environ: Mapping[str, str], *, allow: Iterable[str] = ()) -> dict[str, str]:
    """`environ` without the secrets, except those named in `allow`."""
    keep = set(allow)
    return {k: v for k, v in environ.items() if k not in SECRET_ENV_VARS or k in keep}


@dataclass(frozen=True)
class Profile:
    """An operator profile: the backend, the model, locked values and editable defaults."""

    name: str
    backend: Literal["tinker", "local"]
    model: str
    description: str
    source: Path
    locked: dict[str, dict[str, Any]]
    defaults: dict[str, dict[str, Any]]
    inference: dict[str, Any]
    requires_env: tuple[str, ...] = ()
    # Variables the environment processes get even where they are secrets (an environment's own
    # API key, a dataset token): by name; their values are never shown.
    pass_env: tuple[str, ...] = ()
    # Operator's price for a paid backend (`pricing: {usd_per_million_tokens: X}`): the cost estimate
    # shown before a run starts; without it only the token budget is shown.
    usd_per_million_tokens: float | None = None
    # A self-hosted Tinker-API engine (`engine:`): `kind: skyrl` (started and stopped by the server,
    # with `backend_config`), or `url` (one the operator runs). Runs reach it keyless.
    engine: dict[str, Any] | None = None

    @property
    def spends_money(self) -> bool:
        """Runs on this profile cost money (Tinker's service): starts are confirmed first."""
        return self.backend == "tinker" and self.engine is None

    @property
    def runs_own_vllm(self) -> bool:
        """Its runs sample with a vLLM server of their own (`trainer.sampler: vllm` and no `vllm_url`): the
        vllm runtime is made before the first."""
        trainer = {**self.defaults["trainer"], **self.locked["trainer"]}
        return self.backend == "local" and trainer.get("sampler") == "vllm" and not trainer.get("vllm_url")

    @cached_property
    def tokenizer_name(self) -> str:
        """A hub name, or for the local backend's offline models their folder on disk."""
        locked = self.locked["env"].get("tokenizer_name")
        if locked is not None:
            return str(locked)
        from tinker_atropos.models.paths import model_ref  # torch-free by contract

        return model_ref(self.model)

    @cached_property
    def locked_fields(self) -> dict[str, tuple[str, Any]]:
        """field -> (section, value): the profile's locked values plus the model it implies."""
        out = {"base_model": ("trainer", self.model), "tokenizer_name": ("env", self.tokenizer_name)}
        for section in SECTIONS:
            out.update({name: (section, value) for name, value in self.locked[section].items()})
        return out

    def public(self) -> dict[str, Any]:
        """The profile as shown to agents (rl://profile, config answers)."""
        locked: dict[str, dict[str, Any]] = {section: {} for section in SECTIONS}
        for name, (section, value) in self.locked_fields.items():
            locked[section][name] = value
        return {
            "name": self.name,
            "backend": self.backend,
            "model": self.model,
            "description": self.description,
            "source": str(self.source),
            "requires_env": list(self.requires_env),
            "pass_env": list(self.pass_env),
            "locked": locked,
            "defaults": {s: dict(v) for s, v in self.defaults.items()},
            "engine": self.engine,
        }


def load_profile(name_or_file: str) -> Profile:
    """A bundled profile by name (`tinker`, `local`) or a YAML file path."""
    path = Path(name_or_file).expanduser()
    if not (name_or_file.endswith((".yaml", ".yml")) or path.is_file()):
        path = PROFILES_DIR / f"{name_or_file}.yaml"
        if not path.is_file():
            known = sorted(p.stem for p in PROFILES_DIR.glob("*.yaml"))
            raise SettingsError(f"unknown profile {name_or_file!r}: use one of {known} or a YAML file path")
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"cannot read profile {path}: {exc}") from exc
    if not isinstance(raw, dict):
        raise SettingsError(f"profile {path} must be a YAML mapping")
    return _profile_from_mapping(raw, path)


class _Sections(BaseModel):
    """A profile's `locked` or `defaults`: field values by section."""

    model_config = ConfigDict(extra="forbid")

    env: dict[str, Any] = Field(default_factory=dict)
    trainer: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _old_section_name(cls, data: Any) -> Any:
        """`tinker`, the trainer section's name before it fitted both backends: read as `trainer`."""
        if isinstance(data, dict) and OLD_TRAINER_SECTION in data and TRAINER_SECTION not in data:
            _log.warning(
                "profile section %r is now %r (the trainer's settings, on either backend): read as such; rename it",
                OLD_TRAINER_SECTION,
                TRAINER_SECTION,
            )
            data = with_trainer_section(dict(data))
        return data

    @field_validator("env", "trainer", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any) -> Any:
        return {} if v is None else v


class EngineSpec(BaseModel):
    """A self-hosted Tinker-API engine: `kind: skyrl` (started and stopped by the server, with
    `backend_config`), or `url` (one the operator runs)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["skyrl", "attached"] | None = None
    url: str | None = Field(None, pattern=r"^https?://\S+$")
    backend_config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _reachable(self) -> EngineSpec:
        if self.url is None and self.kind != "skyrl":
            raise ValueError(f"needs 'url' (an engine you run) or 'kind: skyrl', got kind {self.kind!r}")
        return self


class Pricing(BaseModel):
    model_config = ConfigDict(extra="forbid")

    usd_per_million_tokens: float = Field(ge=0)


class ProfileFile(BaseModel):
    """A profile's YAML as the operator writes it (rl_mcp/profiles/*.yaml are the bundled ones)."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = None
    backend: Literal["tinker", "local"]
    model: str = Field(min_length=1)  # the base model
    description: str = ""
    requires_env: list[str] = Field(default_factory=list)
    pass_env: list[str] = Field(default_factory=list)
    locked: _Sections = Field(default_factory=_Sections)
    defaults: _Sections = Field(default_factory=_Sections)
    inference: dict[str, Any] = Field(default_factory=dict)
    pricing: Pricing | None = None
    engine: EngineSpec | None = None

    @field_validator("requires_env", "pass_env", "locked", "defaults", "inference", mode="before")
    @classmethod
    def _none_is_empty(cls, v: Any, info: ValidationInfo) -> Any:
        assert info.field_name is not None
        return cls.model_fields[info.field_name].get_default(call_default_factory=True) if v is None else v

    @model_validator(mode="after")
    def _engine_on_tinker(self) -> ProfileFile:
        if self.engine is not None and self.backend != "tinker":
            raise ValueError("'engine' is a self-hosted Tinker-API engine: only on a profile with backend: tinker")
        return self


def _profile_from_mapping(raw: Mapping[str, Any], path: Path) -> Profile:
    try:
        given = ProfileFile.model_validate(raw)
    except ValidationError as exc:
        raise SettingsError(f"profile {path}: {_problems(exc)}") from None
    engine = given.engine
    return Profile(
        name=given.name or path.stem,
        backend=given.backend,
        model=given.model,
        description=given.description,
        source=path.resolve(),
        locked=given.locked.model_dump(),
        defaults=given.defaults.model_dump(),
        inference=given.inference,
        requires_env=tuple(given.requires_env),
        pass_env=tuple(given.pass_env),
        usd_per_million_tokens=given.pricing.usd_per_million_tokens if given.pricing else None,
        engine=None if engine is None else {**engine.model_dump(), "kind": engine.kind or "attached"},
    )


def _problems(exc: ValidationError) -> str:
    """Each problem as `where`: what, with the value given."""
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(the whole)"
        given = f", got {err['input']!r}" if err["type"] not in ("missing", "extra_forbidden") else ""
        what = "not a known key" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        lines.append(f"`{where}`: {what}{given}")
    return "; ".join(lines)


def default_profile(environ: Mapping[str, str]) -> tuple[str, str]:
    """The profile a server uses when none is named, and why: Tinker when its key is present, else
    the local backend on SmolLM2 (a real model that learns) when it is installed, else on the tiny
    random model (it runs, for tests, but cannot learn)."""
    if environ.get("TINKER_API_KEY"):
        return "tinker", "TINKER_API_KEY is set: training runs on Tinker"
    from tinker_atropos.models.smollm2_wheel import missing  # torch-free by contract

    why_not = missing()
    if why_not is None:
        return "smollm2", "no TINKER_API_KEY, and SmolLM2-135M-Instruct is installed: the local backend trains it"
    return "local", (
        f"no TINKER_API_KEY, and SmolLM2 is not installed ({why_not}): the local backend's tiny random "
        "model, which runs but cannot learn; `make smollm2` installs SmolLM2"
    )


class _FromEnviron(BaseModel):
    """Settings read from environment variables, each under its variable's name (`alias`), each
    default written here once; a bad value is refused naming the variable."""

    model_config = ConfigDict(frozen=True, extra="ignore", validate_by_name=True, validate_by_alias=True)

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> Any:
        try:
            return cls.model_validate({k: v for k, v in env.items() if v != ""})  # empty: unset
        except ValidationError as exc:
            raise SettingsError(f"environment variables: {_problems(exc)}") from None


class EnvLimits(_FromEnviron):
    """How long an environment that scores no group is waited on (runs and rl_test_inference)."""

    error_timeout_s: float = Field(120.0, ge=0, alias="RL_MCP_ENV_ERROR_TIMEOUT")  # its rollouts raise
    # its rollouts return no group, raising nothing: a test stops after this long or this many in a
    # row, whichever comes first; a run fails only after both (the time stretched to this many of its
    # measured groups), or after discard_hard_limit_s of discards alone
    discard_timeout_s: float = Field(120.0, ge=0, alias="RL_MCP_ENV_DISCARD_TIMEOUT")
    discard_groups: int = Field(20, ge=1, alias="RL_MCP_ENV_DISCARD_GROUPS")
    discard_hard_limit_s: float = Field(3600.0, ge=0, alias="RL_MCP_ENV_DISCARD_HARD_LIMIT")


class ServerEnviron(_FromEnviron):
    """The server's own variables (the profile's are read with it: Settings.from_env)."""

    home: Path = Field(Path("~/.rl-mcp"), alias="RL_MCP_HOME")
    cache: Path | None = Field(None, alias="RL_MCP_CACHE")  # default: the home's cache/
    env_dirs: str = Field("", alias="RL_MCP_ENV_DIRS")  # folders of environments, os.pathsep between them
    profile: str | None = Field(None, alias="RL_MCP_PROFILE")
    auth_token: str | None = Field(None, alias="RL_MCP_AUTH_TOKEN")
    introspect_timeout_s: float = Field(60.0, ge=0, alias="RL_MCP_INTROSPECT_TIMEOUT")
    status_min_interval_s: float = Field(1800.0, ge=0, alias="RL_MCP_STATUS_MIN_INTERVAL")  # between two checks
    # the memory a served model may take at most, below what the machine has available (rl_serve_model)
    serve_memory_limit_bytes: int | None = Field(None, ge=0, alias="RL_MCP_SERVE_MEMORY_LIMIT_BYTES")


@dataclass(frozen=True)
class Settings:
    """Everything the server reads from its environment, resolved once."""

    home: Path
    cache_dir: Path
    env_dirs: tuple[Path, ...]
    profile: Profile
    profile_reason: str = "named by the caller"  # why this profile: shown by doctor and rl://profile
    auth_token: str | None = None
    python: str = sys.executable  # the children's: the training runtime (tinker_atropos.venvs.training_python)
    trainer_entry: tuple[str, ...] = TRAINER_ENTRY  # after `python`: the trainer's entry point
    introspect_timeout_s: float = ServerEnviron.model_fields["introspect_timeout_s"].default
    status_min_interval_s: float = ServerEnviron.model_fields["status_min_interval_s"].default
    stop_runs_on_exit: bool = False  # and the served models (rl_serve_model)
    serve_memory_limit_bytes: int | None = None
    # an environment that raises, or scores no group, is waited on this long
    env_limits: EnvLimits = field(default_factory=lambda: EnvLimits.model_validate({}))
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ), repr=False)

    @property
    def env_process_vars(self) -> tuple[str, ...]:
        """What environment processes may see beyond the non-secret environment: the profile's
        `pass_env` and the names in RL_MCP_PASS_ENV (comma-separated)."""
        named = [n.strip() for n in self.environ.get("RL_MCP_PASS_ENV", "").split(",") if n.strip()]
        return tuple(dict.fromkeys([*self.profile.pass_env, *named]))

    @property
    def state_file(self) -> Path:
        return self.home / "state.json"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    @property
    def served_dir(self) -> Path:
        """The served models' folders and records (rl_serve_model)."""
        return self.home / "served"

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        profile: str | None = None,
        auth_token: str | None = None,
        stop_runs_on_exit: bool = False,
    ) -> Settings:
        env = without_placeholders(os.environ if environ is None else environ)
        read: ServerEnviron = ServerEnviron.from_environ(env)
        home = read.home.expanduser().resolve()
        cache_dir = (read.cache or home / "cache").expanduser().resolve()
        extra = [Path(p).expanduser().resolve() for p in read.env_dirs.split(os.pathsep) if p]
        env_dirs = tuple(dict.fromkeys([BUNDLED_ENV_DIR, *extra]))
        if profile:
            chosen, reason = profile, "--profile"
        elif read.profile:
            chosen, reason = read.profile, "RL_MCP_PROFILE"
        else:
            chosen, reason = default_profile(env)
        return cls(
            home=home,
            cache_dir=cache_dir,
            env_dirs=env_dirs,
            profile=load_profile(chosen),
            profile_reason=reason,
            python=training_python(env),
            auth_token=auth_token or read.auth_token,
            introspect_timeout_s=read.introspect_timeout_s,
            status_min_interval_s=read.status_min_interval_s,
            stop_runs_on_exit=stop_runs_on_exit,
            serve_memory_limit_bytes=read.serve_memory_limit_bytes,
            env_limits=EnvLimits.from_environ(env),
            environ=env,
        )
