"""The session state: the selected environment and the agent's edits, persisted atomically in
the state dir after every change, so a restarted server keeps them."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rl_mcp.environments.records import EnvironmentInfo
from rl_mcp.errors import UserError
from tinker_atropos.run_files import atomic_write_text


@dataclass
class SessionState:
    """What persists in state.json."""

    environment: str | None = None
    env_file: str | None = None
    env_class: str | None = None
    wandb_name: str | None = None
    selected_at: str | None = None
    edits: dict[str, Any] = field(default_factory=dict)


class EditRejected(UserError):
    """An edit that was not stored; the message names the problem and the fix."""


class SessionSaveError(UserError, OSError):
    """The session file could not be written; the session in memory is unchanged."""


def wandb_name_for(environment: str, now: datetime | None = None) -> str:
    """`{env}-{timestamp}`: unique per selection, valid as a W&B and trainer run name."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"{environment.replace(':', '.')}-{stamp}"  # reasoning_gym:x -> reasoning_gym.x, as the run id


class Session:
    """The selection and edits, persisted in `path` after every change."""

    def __init__(self, path: Path, state: SessionState | None = None) -> None:
        self.path = path
        self.state = state or SessionState()

    @classmethod
    def load(cls, path: Path) -> Session:
        """The saved session, or an empty one when there is none (or it is unreadable)."""
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            state = SessionState(**{k: v for k, v in data.items() if k in SessionState.__dataclass_fields__})
            state.edits = data["edits"] if isinstance(data.get("edits"), dict) else {}
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
                selected_at=(now or datetime.now(UTC)).isoformat(timespec="seconds"),
                edits={},
            )
        )
        return self.state

    def set_field(self, name: str, value: Any) -> None:
        """Store one edit, already validated (session/fields.py)."""
        new_state = copy.deepcopy(self.state)
        if name == "wandb_name":
            new_state.wandb_name = value
        else:
            new_state.edits[name] = value
        self._commit(new_state)

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
