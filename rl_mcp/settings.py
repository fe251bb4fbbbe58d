"""Where things live and who the operator is: paths, env dirs, the active profile, the auth token.

Everything comes from environment variables and CLI flags, read once at start-up. The profile is
the operator's choice of backend and the values an agent may not change (its `locked` fields).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml

import tinker_atropos
from rl_mcp.errors import UserError
from tinker_atropos.venvs import training_python

PACKAGE_DIR = Path(__file__).resolve().parent
PROFILES_DIR = PACKAGE_DIR / "profiles"
# The trainer's package as installed beside this one (a wheel's site-packages, or a checkout): its
# bundled environments and the files children run are found there, never through a checkout.
TRAINER_PACKAGE_DIR = Path(tinker_atropos.__file__).resolve().parent
BUNDLED_ENV_DIR = TRAINER_PACKAGE_DIR / "environments"
TRAINER_ENTRY = ("-m", "tinker_atropos.trainer.launch")
SECTIONS = ("env", "tinker")


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
        """Its runs sample with a vLLM server of their own (`tinker.sampler: vllm` and no `vllm_url`): the
        vllm runtime is made before the first."""
        tinker = {**self.defaults["tinker"], **self.locked["tinker"]}
        return self.backend == "local" and tinker.get("sampler") == "vllm" and not tinker.get("vllm_url")

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
        out = {"base_model": ("tinker", self.model), "tokenizer_name": ("env", self.tokenizer_name)}
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


def _profile_from_mapping(raw: Mapping[str, Any], path: Path) -> Profile:
    backend = raw.get("backend")
    if backend not in ("tinker", "local"):
        raise SettingsError(f"profile {path}: 'backend' must be 'tinker' or 'local', got {backend!r}")
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise SettingsError(f"profile {path}: 'model' must be a non-empty string (the base model)")

    def sections(key: str) -> dict[str, dict[str, Any]]:
        value = raw.get(key) or {}
        if not isinstance(value, dict) or set(value) - set(SECTIONS):
            raise SettingsError(f"profile {path}: {key!r} must map 'env'/'tinker' to field values")
        out: dict[str, dict[str, Any]] = {}
        for section in SECTIONS:
            fields = value.get(section) or {}
            if not isinstance(fields, dict):
                raise SettingsError(f"profile {path}: '{key}.{section}' must be a mapping")
            out[section] = dict(fields)
        return out

    inference = raw.get("inference") or {}
    if not isinstance(inference, dict):
        raise SettingsError(f"profile {path}: 'inference' must be a mapping")
    return Profile(
        name=str(raw.get("name") or path.stem),
        backend=backend,
        model=model,
        description=str(raw.get("description") or ""),
        source=path.resolve(),
        locked=sections("locked"),
        defaults=sections("defaults"),
        inference=dict(inference),
        requires_env=tuple(str(k) for k in raw.get("requires_env") or ()),
        pass_env=tuple(str(k) for k in raw.get("pass_env") or ()),
        usd_per_million_tokens=_price(raw.get("pricing"), path),
        engine=_engine(raw.get("engine"), backend, path),
    )


def _engine(engine: Any, backend: str, path: Path) -> dict[str, Any] | None:
    if engine is None:
        return None
    if backend != "tinker" or not isinstance(engine, dict):
        raise SettingsError(f"profile {path}: 'engine' must be a mapping, on a profile with backend: tinker")
    url, kind, config = engine.get("url"), engine.get("kind"), engine.get("backend_config") or {}
    if url is not None and not (isinstance(url, str) and re.match(r"^https?://\S+$", url)):
        raise SettingsError(f"profile {path}: 'engine.url' must be an http(s) URL, got {url!r}")
    if url is None and kind != "skyrl":
        raise SettingsError(f"profile {path}: 'engine' needs 'url' (an engine you run) or 'kind: skyrl', got {kind!r}")
    if not isinstance(config, dict):
        raise SettingsError(f"profile {path}: 'engine.backend_config' must be a mapping")
    return {"kind": kind or "attached", "url": url, "backend_config": dict(config)}


def _price(pricing: Any, path: Path) -> float | None:
    if pricing is None:
        return None
    price = pricing.get("usd_per_million_tokens") if isinstance(pricing, dict) else None
    if not isinstance(price, (int, float)) or isinstance(price, bool) or price < 0:
        raise SettingsError(f"profile {path}: 'pricing.usd_per_million_tokens' must be a number >= 0")
    return float(price)


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


@dataclass(frozen=True)
class EnvLimits:
    """How long an environment that scores no group is waited on (runs and rl_test_inference)."""

    error_timeout_s: float = 120.0  # its rollouts raise
    # its rollouts return no group, raising nothing: a test stops after this long or this many in a
    # row, whichever comes first; a run fails only after both (the time stretched to this many of its
    # measured groups), or after discard_hard_limit_s of discards alone
    discard_timeout_s: float = 120.0
    discard_groups: int = 20
    discard_hard_limit_s: float = 3600.0


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
    introspect_timeout_s: float = 60.0
    status_min_interval_s: float = 1800.0  # between two rl_check_status of one active run
    stop_runs_on_exit: bool = False
    # A run whose environment raises and scores no group for this long fails with its exception.
    env_error_timeout_s: float = 120.0
    # One whose rollouts return no group (raising nothing): EnvLimits.
    env_discard_timeout_s: float = 120.0
    env_discard_groups: int = 20
    env_discard_hard_limit_s: float = 3600.0
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ), repr=False)

    @property
    def env_limits(self) -> EnvLimits:
        return EnvLimits(
            self.env_error_timeout_s,
            self.env_discard_timeout_s,
            self.env_discard_groups,
            self.env_discard_hard_limit_s,
        )

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
        home = Path(env.get("RL_MCP_HOME") or "~/.rl-mcp").expanduser().resolve()
        cache_dir = Path(env.get("RL_MCP_CACHE") or home / "cache").expanduser().resolve()
        extra = [Path(p).expanduser().resolve() for p in env.get("RL_MCP_ENV_DIRS", "").split(os.pathsep) if p]
        env_dirs = tuple(dict.fromkeys([BUNDLED_ENV_DIR, *extra]))
        if profile:
            chosen, reason = profile, "--profile"
        elif env.get("RL_MCP_PROFILE"):
            chosen, reason = env["RL_MCP_PROFILE"], "RL_MCP_PROFILE"
        else:
            chosen, reason = default_profile(env)
        return cls(
            home=home,
            cache_dir=cache_dir,
            env_dirs=env_dirs,
            profile=load_profile(chosen),
            profile_reason=reason,
            python=training_python(env),
            auth_token=auth_token or env.get("RL_MCP_AUTH_TOKEN") or None,
            introspect_timeout_s=_seconds(env, "RL_MCP_INTROSPECT_TIMEOUT", 60.0),
            status_min_interval_s=_seconds(env, "RL_MCP_STATUS_MIN_INTERVAL", 1800.0),
            stop_runs_on_exit=stop_runs_on_exit,
            env_error_timeout_s=_seconds(env, "RL_MCP_ENV_ERROR_TIMEOUT", 120.0),
            env_discard_timeout_s=_seconds(env, "RL_MCP_ENV_DISCARD_TIMEOUT", 120.0),
            env_discard_groups=_count(env, "RL_MCP_ENV_DISCARD_GROUPS", 20),
            env_discard_hard_limit_s=_seconds(env, "RL_MCP_ENV_DISCARD_HARD_LIMIT", 3600.0),
            environ=env,
        )


N = TypeVar("N", int, float)


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    return _number(env, name, default, float, 0.0, "seconds")


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    return _number(env, name, default, int, 1, "a whole number")


def _number(env: Mapping[str, str], name: str, default: N, parse: Callable[[str], N], least: N, what: str) -> N:
    raw = env.get(name)
    if raw is None:
        return default
    try:
        return max(parse(raw), least)
    except ValueError as exc:
        raise SettingsError(f"{name} must be {what}, got {raw!r}") from exc
