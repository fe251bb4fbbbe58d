"""What a process's exit means for its run: the pure decision, apart from the bookkeeping."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rl_mcp.runs.vocab import RunStatus
from tinker_atropos.run_files import Outcome, ProcessName, exit_meaning

ADOPTED_EXIT = -1  # the exit of a process that was not our child: its code is unknowable


@dataclass(frozen=True)
class Settlement:
    """The run's final status, why, and whose log tail explains it."""

    status: RunStatus
    error: str | None = None
    tail_of: ProcessName | None = None


def settle_exit(process: ProcessName, code: int, result: dict[str, Any] | None) -> Settlement | None:
    """How the run ends when `process` exits with `code` (None: it goes on)."""
    if process == ProcessName.TRAINER:
        outcome = (result or {}).get("status")
        if code == 0 or (code == ADOPTED_EXIT and outcome in (Outcome.COMPLETED, Outcome.STOPPED)):
            # exit 0 = total_steps done, or SIGTERM from outside this server (then "stopped")
            return Settlement(RunStatus.STOPPED if outcome == Outcome.STOPPED else RunStatus.COMPLETED)
        if code == ADOPTED_EXIT and outcome is None:
            return Settlement(
                RunStatus.LOST,
                "the trainer is gone and wrote no result.json (not a child of this server, so its exit "
                "code is unknown)",
                ProcessName.TRAINER,
            )
        detail = (result or {}).get("error") or exit_meaning(code)
        how = f"exited with code {code}" if code != ADOPTED_EXIT else "failed (it was not a child of this server)"
        return Settlement(RunStatus.FAILED, f"trainer {how}: {detail}", ProcessName.TRAINER)
    if process == ProcessName.ENV and code in (0, ADOPTED_EXIT):
        return None  # the environment exits by itself once its steps are queued
    what = {ProcessName.API: "run-api", ProcessName.ENV: "the environment"}[process]
    return Settlement(RunStatus.FAILED, f"{what} exited with code {code}", process)
