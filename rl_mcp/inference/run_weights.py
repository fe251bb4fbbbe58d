"""What rl_test_inference tests: a run's trained weights (which checkpoint, on which base model) or the
models its arguments name.

The test then serves two models on this machine's inference server, the run's base model and the
same model with the run's adapter, and scores both on the selected environment side by side.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rl_mcp.inference.target import InferenceTestError, LocalWeights, Target, resolve_target
from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from rl_mcp.runs.store import RunLookup, RunRecord
from tinker_atropos.run_files import CheckpointKind, read_checkpoints

_STEP_NAME = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class RunCheckpoint:
    """One saved sampler checkpoint of a run: its step (None for `final`), name and path."""

    step: int | None
    name: str
    path: str


def sampler_checkpoints(rec: RunRecord) -> list[RunCheckpoint]:
    """The run's sampler checkpoints in the order they were saved (the index, docs/run-files.md)."""
    out = []
    for entry in read_checkpoints(Path(rec.run_dir), rec.run_name):
        if entry.get("kind") != CheckpointKind.SAMPLER_WEIGHTS or not entry.get("path"):
            continue
        name = str(entry.get("name", ""))
        match = _STEP_NAME.match(name)
        step = int(match.group(1)) if match else entry.get("step")
        out.append(RunCheckpoint(step if isinstance(step, int) else None, name, str(entry["path"])))
    return out


def saved_checkpoints(rec: RunRecord) -> list[RunCheckpoint]:
    """The run's sampler checkpoints whose weights are still there (a folder on disk, or tinker://)."""
    return [c for c in sampler_checkpoints(rec) if _exists(c.path)]


def pick_checkpoint(rec: RunRecord, step: int | None) -> RunCheckpoint:
    """The named step's checkpoint, else the newest; an error that lists the steps there are."""
    saved = saved_checkpoints(rec)
    if not saved:
        raise InferenceTestError(
            f"run {rec.run_id} has no saved weights yet (no sampler checkpoint in its folder): wait for its "
            "first step (rl_check_status), or pick another run (rl_list_runs)"
        )
    if step is None:
        return saved[-1]
    for checkpoint in reversed(saved):
        if checkpoint.step == step:
            return checkpoint
    steps = sorted({c.step for c in saved if c.step is not None})
    raise InferenceTestError(
        f"run {rec.run_id} has no checkpoint at step {step}; saved steps: {', '.join(map(str, steps)) or 'none'} "
        "(omit checkpoint_step for the newest)"
    )


def run_target(rec: RunRecord, checkpoint: RunCheckpoint) -> Target:
    """The run's base model and its trained weights, both served on this machine."""
    try:
        config = read_run_config(rec.config_path)
    except RUN_CONFIG_ERRORS as exc:
        raise InferenceTestError(
            f"the config of run {rec.run_id} is unreadable ({exc}): its weights cannot be served"
        ) from exc
    trainer = config.get("trainer") or {}
    base, backend = str(trainer.get("base_model") or ""), str(trainer.get("backend") or "local")
    if not base:
        raise InferenceTestError(f"run {rec.run_id}'s config names no trainer.base_model")
    trained = f"{rec.run_id}@{checkpoint.name}"
    engine = None
    if backend == "tinker" and trainer.get("self_hosted"):
        # a self-hosted engine's checkpoint is downloaded and both models sampled here: this works
        # after the run ended and the engine unloaded its model, and takes none of its adapter slots
        backend, engine = "local", trainer.get("tinker_base_url")
        if not engine:
            raise InferenceTestError(f"run {rec.run_id}'s config names no trainer.tinker_base_url (its engine)")
    weights = {
        base: LocalWeights(base, None, backend),
        trained: LocalWeights(base, checkpoint.path, backend, engine_url=engine),
    }
    return Target("local", (base, trained), None, None, "sglang", weights=weights)


def _exists(path: str) -> bool:
    return path.startswith("tinker://") or Path(path).is_dir()


@dataclass(frozen=True)
class ModelsAsked:
    """What rl_test_inference is asked to test: a run's weights (run_id, checkpoint_step) or the models
    named (models, base_url, api_key_env, target), never both."""

    run_id: str | None = None
    checkpoint_step: int | None = None
    models: Sequence[str] | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    target: Literal["local", "openrouter", "base_url"] | None = None


def chosen_target(
    asked: ModelsAsked,
    run: RunLookup,
    *,
    environ: Mapping[str, str],
    local_model: str,
    local_default: bool,
) -> tuple[Target, tuple[str, RunCheckpoint] | None]:
    """Where the test's requests go, and the run and checkpoint tested when it tests a run's weights."""
    if asked.run_id is not None:
        if asked.models or asked.base_url or asked.api_key_env or asked.target not in (None, "local"):
            raise InferenceTestError(
                "run_id tests a run's weights on this machine's inference server: leave models, base_url, "
                "api_key_env and target out (or test those in a separate call)"
            )
        rec = run(asked.run_id)
        checkpoint = pick_checkpoint(rec, asked.checkpoint_step)
        return run_target(rec, checkpoint), (rec.run_id, checkpoint)
    if asked.checkpoint_step is not None:
        raise InferenceTestError("checkpoint_step needs run_id: the run whose checkpoint to test")
    where = resolve_target(
        models=asked.models,
        base_url=asked.base_url,
        api_key_env=asked.api_key_env,
        environ=environ,
        local_model=local_model,
        target=asked.target,
        local_default=local_default,
    )
    return where, None
