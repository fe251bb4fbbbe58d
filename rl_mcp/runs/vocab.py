"""The words a run is described in: its status and the stage of its start."""

from __future__ import annotations

from enum import StrEnum


class RunStatus(StrEnum):
    """Where a run is in its life; the registry stores these."""

    STARTING = "starting"
    """Its processes are being started, one stage after another."""
    RUNNING = "running"
    """All three processes are up and training is under way."""
    STOPPING = "stopping"
    """The run is ending (a stop was requested, or the trainer finished or failed) and its
    processes are being ended; the final status follows."""
    COMPLETED = "completed"
    """The trainer ran every step."""
    FAILED = "failed"
    """A stage or a process failed; `error` says which and why."""
    STOPPED = "stopped"
    """Stopped on request; what was trained is saved."""
    LOST = "lost"
    """Its processes ended while no server supervised them, with no result to say how."""

    @property
    def active(self) -> bool:
        return self in ACTIVE_STATUSES


ACTIVE_STATUSES = frozenset({RunStatus.STARTING, RunStatus.RUNNING, RunStatus.STOPPING})


class Stage(StrEnum):
    """The start stage a run is in while `starting`, in order (docs/run-files.md: readiness)."""

    MODEL = "model"
    """The offline model the run trains (tiny, SmolLM2) is built, when missing, before any process
    that loads it starts; skipped when it is built already."""
    ENGINE = "engine"
    """The self-hosted Tinker engine the run trains on (skyrl profile) is started, when it is not
    running yet (minutes the first time); skipped on other profiles."""
    SFT = "sft"
    """The supervised stage (the environment's `sft` section): examples built, cross_entropy steps on
    the run's adapter between two held-out evaluations; skipped without the section or once done."""
    API = "api"
    """run-api is starting; ready when /status answers."""
    TRAINER = "trainer"
    """The trainer loads the model and registers; ready when its /health says ok."""
    ENV = "env"
    """The environment sets up and registers with run-api."""
