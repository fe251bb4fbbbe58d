"""Resume and fork: a new run that starts from a saved training state of an earlier one.

- resume (`rl_start_training(resume_from=ID)`): the parent's own config.yaml (session edits do not
  leak in), new ports and run folder, the same run_name and W&B run, `total_steps` optionally
  raised.
- fork (`fork=true`): the session's current config (e.g. a lower learning rate), a new W&B run.

Both start from the parent's latest training state (or the one at `checkpoint_step`): the trainer
loads it (`trainer.resume_from`, adapter + optimizer) and numbers its steps from
`trainer.start_step + 1`. The new run's folder is seeded before its trainer starts:

- `metrics.jsonl` / `eval.jsonl` get the parent's lines up to the state's step (the parent's
  lines after it, from a run killed between two saves, are left out), so the new run's results
  and curves cover steps 1..N once each and need no stitching at read time;
- the environment's data position (atroposlib env checkpoint) at that step, so the environment
  goes on where the parent was instead of repeating the first items;
- the parent's supervised stage (`sft/`): done, it is not trained again (a fork from its state, step
  0, starts RL with other settings); stopped before its end, the new run goes on with it.

The parent is never written to.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from rl_mcp.runs.live import Lineage, RunPlan
from rl_mcp.runs.preflight import RunError
from rl_mcp.runs.store import RunRecord
from tinker_atropos.best_checkpoint import weights_path
from tinker_atropos.run_files import (
    RunFiles,
    TrainingState,
    atomic_write_text,
    latest_env_position,
    read_checkpoints,
    read_jsonl,
    read_training_states,
    stopped_sft,
)


class ResumeRefused(RunError):
    """A resume or fork that cannot start; the message says why and what to do."""


@dataclass(frozen=True)
class ModelIdentity:
    """What a training state must match: backend, base model, LoRA rank."""

    backend: str
    base_model: str
    lora_rank: int


def choose_state(parent: RunRecord, checkpoint_step: int | None) -> TrainingState:
    """The parent's state to start from, or a refusal (still active, no state, no such step)."""
    if parent.active:
        raise ResumeRefused(
            f"run {parent.run_id} is still {parent.status}: stop it first (rl_stop_training) or wait for it "
            "to end; a run is resumed from what it saved, never while it trains"
        )
    states = read_training_states(Path(parent.run_dir))
    if not states and (stopped := stopped_stage_state(parent)) is not None:
        return stopped  # stopped in its supervised stage: the new run goes on with it
    if not states:
        raise ResumeRefused(
            f"run {parent.run_id} has no saved training state to resume from (it ended before its first "
            "save: trainer.save_state_every steps, or a stop); start a new run instead"
        )
    steps = sorted({s.step for s in states})
    if checkpoint_step is None:
        return states[-1]
    matching = [s for s in states if s.step == checkpoint_step]
    if not matching:
        raise ResumeRefused(
            f"run {parent.run_id} has no training state at step {checkpoint_step}; saved states are at "
            f"steps {', '.join(map(str, steps))} (omit checkpoint_step for the latest)"
        )
    return matching[-1]


STOPPED_STAGE = "sft-stopped"  # the state a stopped supervised stage saved (tinker_atropos.sft.stage)


def stopped_stage_state(parent: RunRecord) -> TrainingState | None:
    """The state of a supervised stage stopped before its end, as a state to go on from (step 0)."""
    stopped = stopped_sft(Path(parent.run_dir))
    if stopped is None:
        return None
    identity = identity_of(parent_config(parent)["trainer"])
    return TrainingState(0, stopped[1], STOPPED_STAGE, identity.backend, identity.base_model, identity.lora_rank)


def check_fits(state: TrainingState, target: ModelIdentity, parent_id: str) -> None:
    """Refuse a state from another backend, base model or LoRA rank than the run would train."""
    problems = []
    if state.backend != target.backend:
        problems.append(f"backend {state.backend!r} (this run: {target.backend!r})")
    if state.base_model != target.base_model:
        problems.append(f"base model {state.base_model!r} (this run: {target.base_model!r})")
    if state.lora_rank != target.lora_rank:
        problems.append(f"LoRA rank {state.lora_rank} (this run: {target.lora_rank})")
    if problems:
        raise ResumeRefused(
            f"the state of run {parent_id} at step {state.step} was saved with {'; '.join(problems)}: a LoRA "
            "state only loads into the same base model and rank; change the session's config to match, "
            "or start a new run"
        )


def identity_of(trainer: dict[str, Any]) -> ModelIdentity:
    return ModelIdentity(
        str(trainer.get("backend")), str(trainer.get("base_model")), int(trainer.get("lora_rank") or 0)
    )


def parent_config(parent: RunRecord) -> dict[str, Any]:
    try:
        data = read_run_config(parent.config_path)
    except RUN_CONFIG_ERRORS as exc:
        raise ResumeRefused(f"run {parent.run_id}: its config {parent.config_path} cannot be read ({exc})") from exc
    if not isinstance(data.get("trainer"), dict) or not isinstance(data.get("env"), dict):  # {}: no mapping at all
        raise ResumeRefused(f"run {parent.run_id}: its config {parent.config_path} is not a run config")
    return data


def _total(requested: int | None, current: int, state: TrainingState, parent: RunRecord) -> int:
    total = requested if requested is not None else current
    if total <= state.step:
        raise ResumeRefused(
            f"total_steps {total} leaves nothing to train after the state at step {state.step} of run "
            f"{parent.run_id}: pass total_steps > {state.step}"
        )
    return total


def resume_plan(parent: RunRecord, state: TrainingState, env_file: Path, *, total_steps: int | None = None) -> RunPlan:
    """Continue `parent` from `state` with its own config."""
    config = parent_config(parent)
    check_fits(state, identity_of(config["trainer"]), parent.run_id)
    total = _total(total_steps, int(config["trainer"].get("total_steps") or 0), state, parent)

    def write(run_dir: Path, api_port: int, inference_port: int, run_name: str) -> Path:
        data = json.loads(json.dumps(config))  # a private deep copy
        data["trainer"]["wandb_run_id"] = state.wandb_run_id  # the same W&B run goes on
        path = _write_started(data, parent, state, run_dir, api_port, inference_port, run_name, total)
        if parent.files.teacher.is_file():  # its teacher goes on too (a fork's is the session's)
            shutil.copyfile(parent.files.teacher, RunFiles(run_dir).teacher)
        return path

    return RunPlan(
        environment=parent.environment,
        env_file=env_file,
        write_config=write,
        run_name=parent.run_name,
        lineage=Lineage(parent.run_id, state.step, forked=False),
    )


def fork_plan(
    parent: RunRecord, state: TrainingState, session_plan: RunPlan, target: ModelIdentity, *, total_steps: int | None
) -> RunPlan:
    """A new run from `state` with the session's config (`session_plan` writes it)."""
    if session_plan.environment != parent.environment:
        raise ResumeRefused(
            f"a fork of run {parent.run_id} trains its environment {parent.environment!r}, but the session has "
            f"{session_plan.environment!r} selected: rl_select_environment({parent.environment!r}) first"
        )
    check_fits(state, target, parent.run_id)

    def write(run_dir: Path, api_port: int, inference_port: int, run_name: str) -> Path:
        path = session_plan.write_config(run_dir, api_port, inference_port, run_name)
        data = read_run_config(path)
        total = _total(total_steps, int(data["trainer"]["total_steps"]), state, parent)
        data["trainer"]["wandb_run_id"] = None  # a fork is a new W&B run
        return _write_started(data, parent, state, run_dir, api_port, inference_port, run_name, total)

    return RunPlan(
        environment=session_plan.environment,
        env_file=session_plan.env_file,
        write_config=write,
        run_name=session_plan.run_name,
        lineage=Lineage(parent.run_id, state.step, forked=True),
        module_home=session_plan.module_home,
    )


def _write_started(
    data: dict[str, Any],
    parent: RunRecord,
    state: TrainingState,
    run_dir: Path,
    api_port: int,
    inference_port: int,
    run_name: str,
    total: int,
) -> Path:
    """Point `data` at this run (ports, folder, name, state, steps), write it, seed the folder."""
    run_dir = Path(run_dir).resolve()
    api_url = f"http://127.0.0.1:{api_port}"
    env, trainer = data["env"], data["trainer"]
    env.update(rollout_server_url=api_url, data_dir_to_save_evals=str(run_dir), total_steps=total)
    trainer.update(
        api_url=api_url,
        inference_port=inference_port,
        run_dir=str(run_dir),
        run_name=run_name,
        total_steps=total,
        # a stopped supervised stage goes on from its own state (its copied sft/), and RL from where it ends
        resume_from=None if state.name == STOPPED_STAGE else state.path,
        start_step=state.step,
    )
    for server in data.get("openai") or []:
        if str(server.get("base_url", "")).startswith("http://127.0.0.1:"):  # the run's own inference server
            server["base_url"] = f"http://127.0.0.1:{inference_port}/v1"
    files = RunFiles(run_dir)
    atomic_write_text(files.config, yaml.safe_dump(data, sort_keys=False))
    seed_run_folder(parent, state.step, files, str(env.get("wandb_name") or run_name))
    return files.config


def seed_run_folder(parent: RunRecord, step: int, files: RunFiles, env_wandb_name: str) -> None:
    """The parent's metrics and evals up to `step`, its supervised stage (sft/: done, or stopped to go
    on with), and the environment's data position there."""
    source = parent.files
    if source.sft_dir.is_dir():
        shutil.copytree(source.sft_dir, files.sft_dir, dirs_exist_ok=True)
    parent_weights = read_checkpoints(Path(parent.run_dir), parent.run_name)
    for src, dst in (
        (source.metrics, files.metrics),
        (source.evals, files.evals),
        (source.validation, files.validation),
    ):
        rows = [r for r in read_jsonl(src) if _step_of(r) is not None and _step_of(r) <= step]  # type: ignore[operator]
        for row in rows:  # the parent's weights by path: the best checkpoint may be one of them
            if isinstance(name := row.get("weights"), str) and (path := weights_path(name, parent_weights)):
                row["weights"] = path
        if rows:
            atomic_write_text(dst, "".join(json.dumps(r) + "\n" for r in rows))
    parent_env_name = _env_wandb_name(parent)
    position = latest_env_position(Path(parent.run_dir), parent_env_name, step) if parent_env_name else None
    if position is not None:
        target = files.env_position(env_wandb_name, step)
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, json.dumps(position[1]))


def _step_of(row: dict[str, Any]) -> int | None:
    value = row.get("step")
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _env_wandb_name(parent: RunRecord) -> str | None:
    try:
        env = parent_config(parent)["env"]
    except ResumeRefused:
        return None
    name = env.get("wandb_name")
    return str(name) if name else None
