"""What an export will do: the run's checkpoint (a step, `final`, or `best` by validation), the
format and its dtype, the output folder, and the prompts the export is checked on."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from rl_mcp.errors import UserError
from rl_mcp.inference.run_weights import RunCheckpoint, saved_checkpoints
from rl_mcp.runs.checkpoint_choice import checkpoint_choice
from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from rl_mcp.runs.store import RunRecord
from tinker_atropos.best_checkpoint import weights_name
from tinker_atropos.run_files import CheckpointKind, RunFiles, read_checkpoints, read_jsonl, read_result

Format = Literal["adapter", "merged", "gguf"]
DTYPES: dict[str, tuple[str, ...]] = {
    "adapter": (),
    "merged": ("float32", "bfloat16", "float16"),
    "gguf": ("f16", "q8_0"),
}
VERIFY_PROMPTS = 4  # the environment's own prompts the export is checked on


class ExportError(UserError):
    """An export that cannot be done as asked; the message says what to change."""


@dataclass(frozen=True)
class ExportPlan:
    run_id: str
    environment: str
    run_dir: Path
    base_model: str
    backend: str
    checkpoint: RunCheckpoint
    chosen_because: str  # how `checkpoint` was picked: the user's step, final, or best by eval
    format: Format
    dtype: str | None
    out: Path
    name: str  # the model's name in GGUF metadata and the Modelfile
    tinker_state: str | None  # a Tinker run: the training state Tinker exports the weights from
    tinker_base_url: str | None
    self_hosted: bool = False  # a self-hosted engine's run: the sampler checkpoint's archive is downloaded


def plan_export(
    rec: RunRecord, checkpoint: str | int | None, fmt: Format, dtype: str | None, out: Path | None
) -> ExportPlan:
    if dtype is not None and dtype not in DTYPES[fmt]:
        allowed = ", ".join(DTYPES[fmt]) or "none (an adapter is saved as trained)"
        raise ExportError(f"dtype {dtype!r} does not apply to format {fmt!r}; allowed: {allowed}")
    trainer = _run_config(rec).get("trainer") or {}
    saved = saved_checkpoints(rec)
    if not saved:
        raise ExportError(
            f"run {rec.run_id} has no saved weights (no sampler checkpoint in its folder): wait for its first "
            "step (rl_check_status), or export another run (rl_list_runs)"
        )
    chosen, why = choose_checkpoint(rec, saved, checkpoint, keep_best=bool(trainer.get("keep_best", True)))
    backend = str(trainer.get("backend") or "local")
    self_hosted = backend == "tinker" and bool(trainer.get("self_hosted"))
    state = None
    if backend == "tinker" and not self_hosted:
        try:
            state = _tinker_state(rec, chosen)
        except ExportError:
            if checkpoint is not None or chosen.name == "final":
                raise
            why = f"the final weights: the best by validation ({chosen.name}) has no training state Tinker exports from"
            chosen = next((c for c in reversed(saved) if c.name == "final"), saved[-1])
            state = _tinker_state(rec, chosen)
    label = f"{chosen.name}-{fmt}" + (f"-{dtype}" if dtype else "")
    return ExportPlan(
        run_id=rec.run_id,
        environment=rec.environment,
        run_dir=Path(rec.run_dir),
        base_model=str(trainer.get("base_model") or ""),
        backend=backend,
        checkpoint=chosen,
        chosen_because=why,
        format=fmt,
        dtype=dtype,
        out=Path(out).expanduser().resolve() if out else RunFiles(Path(rec.run_dir)).exports_dir / label,
        name=f"{rec.environment}-{rec.run_id.rsplit('-', 1)[-1]}".replace("_", "-"),
        tinker_state=state,
        tinker_base_url=trainer.get("tinker_base_url"),
        self_hosted=self_hosted,
    )


def choose_checkpoint(
    rec: RunRecord, saved: list[RunCheckpoint], wanted: str | int | None, *, keep_best: bool
) -> tuple[RunCheckpoint, str]:
    steps = [c.step for c in saved if c.step is not None]
    if isinstance(wanted, int):
        for c in reversed(saved):
            if c.step == wanted:
                return c, f"step {wanted}, as asked"
        raise ExportError(
            f"run {rec.run_id} has no checkpoint at step {wanted}; saved steps: {', '.join(map(str, steps)) or 'none'}"
        )
    files = RunFiles(Path(rec.run_dir))
    choice = checkpoint_choice(read_jsonl(files.validation), read_jsonl(files.evals), keep_best)
    if wanted == "best" or (wanted is None and choice is not None and keep_best):
        if choice is None or choice.best is None:
            raise ExportError(
                f"run {rec.run_id} has no validation evaluation of a trained checkpoint, so no 'best' (its "
                "environment has no validation set, or no periodic evaluation ran): ask for 'final' or a step instead"
            )
        best = choice.best
        found = next((c for c in reversed(saved) if c.name == best.weights), None)
        if found is None and "/" in best.weights and Path(best.weights).is_dir():  # a resumed run's parent's
            found = RunCheckpoint(best.step, weights_name(best.step), best.weights)
        if found is None:
            raise ExportError(
                f"run {rec.run_id}'s best checkpoint {best.weights} is not on disk: ask for 'final' or a step instead"
            )
        why = f"best validation accuracy ({best.validation_accuracy:.3f} at step {best.step})"
        if best.held_out_accuracy is not None:
            why += f", held-out {best.held_out_accuracy:.3f}"
        base = next((float(e["eval_accuracy"]) for e in read_jsonl(files.validation) if e.get("step") == 0), None)
        if base is not None and best.validation_accuracy is not None and base > best.validation_accuracy:
            why += f"; the base model scored {base:.3f} before training: training did not improve it"
        return found, why
    if wanted in (None, "final"):
        final = next((c for c in reversed(saved) if c.name == "final"), saved[-1])
        taken = (read_result(Path(rec.run_dir)) or {}).get("steps")
        if final.step is None and isinstance(taken, int):  # the index of a Tinker run names no step for it
            final = replace(final, step=taken)
        why = "keep_best is off" if not keep_best else "the run has no validation evaluation"
        return final, "the final weights" if wanted == "final" else f"the final weights ({why})"
    raise ExportError(f"checkpoint {wanted!r} is not 'best', 'final' or a step number")


def _tinker_state(rec: RunRecord, chosen: RunCheckpoint) -> str:
    """Tinker lets only training states out: the one saved at the chosen step."""
    states = [e for e in read_checkpoints(Path(rec.run_dir), rec.run_name) if e.get("kind") == CheckpointKind.WEIGHTS]
    for entry in reversed(states):
        if chosen.step is None or entry.get("step") == chosen.step or entry.get("name") == chosen.name:
            return str(entry["path"])
    have = sorted({int(e["step"]) for e in states if isinstance(e.get("step"), int)})
    raise ExportError(
        f"Tinker exports a run's weights from its saved training states, and run {rec.run_id} saved none at "
        f"{chosen.name}; steps with a state: {', '.join(map(str, have)) or 'none'} (save_state_every sets how often)"
    )


def _run_config(rec: RunRecord) -> dict[str, Any]:
    try:
        return read_run_config(rec.config_path)
    except RUN_CONFIG_ERRORS as exc:
        raise ExportError(f"the config of run {rec.run_id} is unreadable ({exc})") from exc


def verify_prompts(run_dir: Path) -> list[list[int]]:
    """Prompt tokens of the environment's own items, from the first batch the trainer took: each
    group's sequence up to its first trained token."""
    try:
        groups = json.loads(RunFiles(run_dir).first_batch.read_text()).get("groups") or []
    except (OSError, ValueError):
        return []
    prompts: list[list[int]] = []
    for group in groups:
        tokens, masks = (group.get("tokens") or [[]])[0], (group.get("masks") or [[]])[0]
        cut = next((i for i, m in enumerate(masks) if m != -100), len(tokens))
        if 0 < cut and tokens[:cut] not in prompts:
            prompts.append(tokens[:cut])
    return prompts[:VERIFY_PROMPTS]
