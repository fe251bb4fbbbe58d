"""Checks before a run starts: what would make it fail in its first seconds, said up front."""

from __future__ import annotations

from pathlib import Path

from rl_mcp.errors import UserError
from rl_mcp.settings import Settings


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
    if profile.backend == "tinker":
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
