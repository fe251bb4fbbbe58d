"""Checks before a run starts: what would make it fail in its first seconds, said up front."""

from __future__ import annotations

from pathlib import Path

from rl_mcp.engines.from_profile import attached_url
from rl_mcp.engines.skyrl import VENV_VAR, EngineSetupError, check_model, check_venv, default_venv
from rl_mcp.errors import UserError
from rl_mcp.settings import Settings
from tinker_atropos.models.paths import model_ref


class RunError(UserError):
    """A request about runs that cannot be served; the message says what to do instead."""


def preflight(settings: Settings, environment: str, env_file: Path) -> None:
    """Raise RunError naming what is missing: the environment file, or a key the profile needs."""
    profile = settings.profile
    if not env_file.is_file():
        raise RunError(
            f"environment {environment!r} file {env_file} is missing; "
            "call rl_list_environments and rl_select_environment again"
        )
    if profile.engine is not None:
        _engine_preflight(settings)
    elif profile.backend == "tinker":
        key = settings.environ.get("TINKER_API_KEY", "")
        if not key:
            raise RunError(
                "profile 'tinker' needs TINKER_API_KEY in the server's environment "
                "(get one at https://tinker-console.thinkingmachines.ai); or start the server "
                "with --profile local to train on this machine"
            )
        if not key.startswith("tml-"):
            raise RunError("TINKER_API_KEY is malformed: Tinker keys start with 'tml-'")
    missing = [k for k in profile.requires_env if not settings.environ.get(k)]
    if missing:
        raise RunError(f"profile {profile.name!r} needs {', '.join(missing)} set in the server's environment")


def _engine_preflight(settings: Settings) -> None:
    """A managed engine's model is one it can load, and its venv is there."""
    if attached_url(settings) is not None:
        return
    model_dir = Path(model_ref(settings.profile.model))
    try:
        if (model_dir / "config.json").is_file():  # else it is built at stage `model`, checked at `engine`
            check_model(settings.profile.model, model_dir)
        if settings.environ.get(VENV_VAR):  # else the engine's runtime is made at its first start
            check_venv(default_venv(settings.environ), settings.environ)
    except EngineSetupError as exc:
        raise RunError(str(exc)) from exc


def unknown_run(run_id: str, known: list[str]) -> RunError:
    """The error for a run id the registry does not hold, naming the ones it does."""
    hint = "no runs yet: start one with rl_start_training"
    if known:
        hint = f"known runs: {', '.join(known[:20])} (rl_list_runs lists them all)"
    return RunError(f"unknown run id {run_id!r}; {hint}")
