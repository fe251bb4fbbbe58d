"""What the run manager keeps per run, and what it needs from and tells the layers above."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import anyio

from rl_mcp.environments.missing_module import MODULE_TAIL_LINES, ModuleHome, explained
from rl_mcp.logs import tail_lines
from rl_mcp.processes import Child
from rl_mcp.runs.config_file import read_run_config
from rl_mcp.runs.store import RunRecord
from tinker_atropos.run_files import ProcessName


@dataclass(frozen=True)
class Lineage:
    """Where a run started from: its parent's training state after `step` steps."""

    parent: str
    step: int
    forked: bool  # True: the session's config (a fork); False: the parent's own (a resume)

    def record_fields(self) -> dict[str, Any]:
        """The registry's lineage columns (RunRecord)."""
        return {"resumed_from": self.parent, "resumed_step": self.step, "forked": self.forked}


@dataclass
class RunPlan:
    """What a start needs from the session: the environment and how to write the run config.

    `write_config(run_dir, api_port, inference_port, run_name)` writes `run_dir/config.yaml`
    (profile locked values + the agent's edits + these ports) and returns its path.
    """

    environment: str
    env_file: Path
    write_config: Callable[[Path, int, int, str], Path]
    run_name: str | None = None  # the selection's wandb_name; the run id when another run has it
    lineage: Lineage | None = None  # set for a resume (which keeps the parent's run_name) or a fork
    module_home: ModuleHome | None = None  # where the environment's code imports from (a missing module's fix)

    @property
    def keeps_run_name(self) -> bool:
        """A resume goes on under its parent's run_name (and W&B run), even though that run has it."""
        return self.lineage is not None and not self.lineage.forked


class RunListener(Protocol):
    """Told about run changes; the MCP layer's listeners push notifications and prune caches."""

    def run_changed(self, rec: RunRecord) -> None:
        """`rec` changed (called often; throttle). Once final, it changes no more."""

    def runs_list_changed(self) -> None:
        """A run appeared: its resources exist from now on."""


class RunEvents:
    """Fans the manager's reports out to every listener; cheap, never blocks."""

    def __init__(self) -> None:
        self._listeners: list[RunListener] = []

    def add_listener(self, listener: RunListener) -> None:
        self._listeners.append(listener)

    def run_changed(self, rec: RunRecord) -> None:
        for listener in self._listeners:
            listener.run_changed(rec)

    def runs_list_changed(self) -> None:
        for listener in self._listeners:
            listener.runs_list_changed()


@dataclass
class Live:
    """A run this server lifetime supervises."""

    rec: RunRecord
    children: dict[ProcessName, Child] = field(default_factory=dict)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    settled: anyio.Event = field(default_factory=anyio.Event)  # running, or final
    changed: anyio.Event = field(default_factory=anyio.Event)  # set (and replaced) on every change
    stop_requested: bool = False
    ports_reserved: list[int] = field(default_factory=list)
    module_home: ModuleHome | None = None  # the plan's: a missing module named with its fix

    def touch(self) -> None:
        """Wake whoever waits for the next stage or the settling."""
        self.changed.set()
        self.changed = anyio.Event()

    def explained(self, error: str | None, tail_of: str | None) -> str | None:
        """A failure's error, led by the fix where the environment's log names a missing module."""
        if tail_of != ProcessName.ENV or self.module_home is None:
            return error
        return explained(error, tail_lines(self.rec.log_path(tail_of), MODULE_TAIL_LINES), self.module_home)

    def settle(self) -> None:
        self.settled.set()
        self.touch()


def read_run_identity(config_path: Path, fallback: str) -> tuple[str, int]:
    """run_name and total_steps as the trainer will read them from the written config."""
    data = read_run_config(config_path)
    trainer = data.get("trainer") or {}
    env = data.get("env") or {}
    run_name = str(trainer.get("run_name") or env.get("wandb_name") or fallback)
    total_steps = int(trainer.get("total_steps") or env.get("total_steps") or 0)
    return run_name, total_steps


Progress = Callable[[float, float, str], Awaitable[None]]
"""A start's progress report: (done, total, message)."""


async def no_progress(progress: float, total: float, message: str) -> None:
    return None
