"""An environment's rollouts as its process reports them (env_health.json): the latest exception,
and when a run whose environment only raises is to fail rather than wait for a batch forever."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EnvError:
    """The environment's latest exception in `collect_trajectories`, and how it stands."""

    type: str
    message: str
    where: str
    at: float
    errors: int  # exceptions so far
    groups: int  # groups scored so far
    last_group_at: float | None

    @property
    def line(self) -> str:
        return f"{self.type}: {self.message} (at {self.where})"


def latest_error(path: Path) -> EnvError | None:
    """The latest exception recorded in `path`, or None (no file yet, or no exception)."""
    try:
        health = json.loads(path.read_text())
        last = health["last_error"]
        if not last:
            return None
        return EnvError(
            type=str(last["type"]),
            message=str(last["message"]),
            where=str(last["where"]),
            at=float(last["at"]),
            errors=int(health["errors"]),
            groups=int(health["groups"]),
            last_group_at=health.get("last_group_at"),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def stalled(path: Path, running_since: float | None, timeout_s: float, now: float | None = None) -> str | None:
    """The failure of a run (running since `running_since`) whose environment has raised and scored no
    group for `timeout_s`, else None."""
    error = latest_error(path)
    if error is None or running_since is None:
        return None
    quiet_since = max(error.last_group_at or 0.0, running_since)
    if (now or time.time()) - quiet_since < timeout_s or error.at < quiet_since:
        return None
    return (
        f"the environment scored no group for {timeout_s:.0f} s while its rollouts raised "
        f"({error.errors} exceptions, {error.groups} groups scored in all); the latest: {error.line}. "
        "Fix the environment and try again"
    )
