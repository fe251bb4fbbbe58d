"""What rl_start_training starts: a new run from the session's config, a resume of a stopped run (its
own config), or a fork (a stopped run's state with the session's config).

Decided here, from the session and the runs, so a test plans a start without MCP; the tool awaits only
what a plan needs first (the environment's schema, its runtime) and hands the plan to the RunManager.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rl_mcp.distill.teacher import Teacher
from rl_mcp.environments.discovery import Catalog
from rl_mcp.environments.missing_module import ModuleHome
from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo
from rl_mcp.runs import resume
from rl_mcp.runs.live import RunPlan
from rl_mcp.runs.preflight import RunError
from rl_mcp.runs.store import RunLookup
from rl_mcp.session.fields import effective_value
from rl_mcp.session.run_config import render_run_config, write_run_config
from rl_mcp.session.state import SessionState
from rl_mcp.settings import Profile
from tinker_atropos.run_files import RunFiles, atomic_write_text


@dataclass(frozen=True)
class StartRequest:
    """rl_start_training's arguments beyond `wait`."""

    resume_from: str | None = None
    checkpoint_step: int | None = None
    fork: bool = False
    total_steps: int | None = None

    def __post_init__(self) -> None:
        given = self.checkpoint_step is not None or self.fork or self.total_steps is not None
        if self.resume_from is None and given:
            raise RunError(
                "checkpoint_step, fork and total_steps go with resume_from=<run id>; without it, "
                "edit the session's config (rl_edit_config) and start a new run"
            )

    @property
    def resumes(self) -> bool:
        """A resume: the parent's own config, nothing of the session's."""
        return self.resume_from is not None and not self.fork


def resumed(request: StartRequest, run: RunLookup, catalog: Catalog) -> RunPlan:
    """The plan that goes on with a stopped run from one of its states."""
    assert request.resume_from is not None
    parent = run(request.resume_from)
    saved = resume.choose_state(parent, request.checkpoint_step)
    info = catalog.environments.get(parent.environment)
    if info is None:
        raise RunError(
            f"run {parent.run_id}'s environment {parent.environment!r} is no longer found in the environment "
            "dirs: it cannot be resumed until its file is back (rl_list_environments)"
        )
    return resume.resume_plan(parent, saved, info.file, total_steps=request.total_steps)


@dataclass(frozen=True)
class SessionStart:
    """The session's side of a new run or a fork: what its config is rendered from."""

    profile: Profile
    schema: ConfigSchema
    state: SessionState
    info: EnvironmentInfo
    module_home: ModuleHome  # where the environment's code imports from (its runtime's)
    engine_url: str | None = None  # a self-hosted Tinker engine the profile trains on
    teacher: Teacher | None = None  # resolved before anything starts (rl_mcp/distill/teacher.py)


def from_session(start: SessionStart, request: StartRequest, run: RunLookup) -> RunPlan:
    """A new run with the session's config; with `request.fork`, from a stopped run's state."""

    def write(run_dir: Path, api_port: int, inference_port: int, run_name: str) -> Path:
        config = render_run_config(
            profile=start.profile,
            schema=start.schema,
            state=start.state,
            api_port=api_port,
            inference_port=inference_port,
            run_dir=run_dir,
            run_name=run_name,
            engine_url=start.engine_url,
        )
        atomic_write_text(RunFiles(run_dir).edits, json.dumps(start.state.edits, indent=1, default=str))
        if start.teacher is not None:
            config["trainer"]["teacher"] = start.teacher.ref
            start.teacher.write(run_dir)
        return write_run_config(RunFiles(run_dir).config, config)

    plan = RunPlan(
        start.info.name, start.info.file, write, run_name=start.state.wandb_name, module_home=start.module_home
    )
    if request.resume_from is None:
        return plan
    parent = run(request.resume_from)
    saved = resume.choose_state(parent, request.checkpoint_step)
    rank = effective_value(start.schema, start.profile, start.state, "lora_rank")
    target = resume.ModelIdentity(start.profile.backend, start.profile.model, int(rank or 0))  # what its state must fit
    return resume.fork_plan(parent, saved, plan, target, total_steps=request.total_steps)
