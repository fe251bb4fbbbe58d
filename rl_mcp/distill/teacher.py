"""The teacher a run starts with: the session's `teacher` resolved to what the trainer loads, its
tokenizer checked against the student's, and what is known of its held-out score.

A finished run's id or folder becomes its handed-out weights (the best by validation, else the final:
export's rule), so an agent names a teacher by rl_list_runs' id. A teacher that cannot score the
student's tokens is refused here, before a run id, a folder or a process exists.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rl_mcp.environments.records import ConfigSchema
from rl_mcp.export.plan import ExportError, choose_checkpoint
from rl_mcp.inference.run_weights import sampler_checkpoints, saved_checkpoints
from rl_mcp.runs.checkpoint_choice import checkpoint_choice
from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from rl_mcp.runs.preflight import RunError
from rl_mcp.runs.store import RunRecord
from rl_mcp.session.fields import resolve_field
from rl_mcp.session.state import SessionState
from rl_mcp.settings import Profile
from tinker_atropos.best_checkpoint import BEST
from tinker_atropos.distill.tokenizers import tokenizer_mismatch
from tinker_atropos.models.paths import model_ref, offline_model_named
from tinker_atropos.run_files import RunFiles, atomic_write_text, read_jsonl


@dataclass(frozen=True)
class Student:
    """What the teacher is checked against: the run's backend and base model."""

    backend: str  # local | tinker
    base_model: str
    self_hosted: bool = False  # a self-hosted Tinker engine: only its own runs' tinker:// weights load there


@dataclass(frozen=True)
class Teacher:
    """trainer.teacher as the trainer gets it (`ref`), and what the run's files say of it (teacher.json)."""

    ref: str  # an adapter folder, a tinker:// path, a base model, or the endpoint's model name
    base_model: str
    described: str
    run_id: str | None = None  # a run of this product's
    held_out_accuracy: float | None = None  # that run's held-out score of the weights taken
    url: str | None = None  # teacher_url

    def write(self, run_dir: Path) -> None:
        atomic_write_text(RunFiles(run_dir).teacher, json.dumps(asdict(self), indent=1))


def resolve_teacher(value: str, url: str | None, student: Student, runs: list[RunRecord]) -> Teacher:
    """The teacher `value` names, checked; RunError says why one cannot teach this student."""
    if url:  # its tokenizer is checked by the trainer against the endpoint's /tokenize
        return Teacher(value, value, f"{value} served at {url}", url=url)
    by_id = {r.run_id: r for r in runs}
    by_dir = {str(Path(r.run_dir).resolve()): r for r in runs}
    rec = by_id.get(value) or (by_dir.get(str(Path(value).expanduser().resolve())) if "://" not in value else None)
    if rec is not None:
        teacher = _from_run(rec, student)
    elif value.startswith("tinker://"):
        teacher = _from_tinker_path(value, student, runs)
    else:
        teacher = _from_model(value, student)
    why = tokenizer_mismatch(student.base_model, teacher.base_model, backend=student.backend)
    if why:
        raise RunError(
            f"teacher {value!r} cannot teach this run: {why}. A teacher scores the student's own token ids, so it "
            "must share the student's tokenizer (cross-tokenizer distillation is not supported); pick a teacher "
            "on the same model family, or rl_edit_config teacher=null"
        )
    return teacher


def _from_run(rec: RunRecord, student: Student) -> Teacher:
    try:
        trainer = read_run_config(rec.config_path).get("trainer") or {}
    except RUN_CONFIG_ERRORS as exc:
        raise RunError(f"teacher run {rec.run_id}: its config is unreadable ({exc})") from exc
    backend, self_hosted = str(trainer.get("backend") or "local"), bool(trainer.get("self_hosted"))
    if (backend, self_hosted) != (student.backend, student.self_hosted):
        raise RunError(
            f"teacher run {rec.run_id} trained on the {_where(backend, self_hosted)}, and this profile trains on "
            f"the {_where(student.backend, student.self_hosted)}: its weights load only where they were trained; "
            "export it (rl_export_model) and name the folder, or pick a run of this profile (rl_list_runs)"
        )
    saved = saved_checkpoints(rec)
    if not saved:
        raise RunError(f"teacher run {rec.run_id} has no saved weights yet: wait for its first step, or pick another")
    keep_best = bool(trainer.get("keep_best", True))
    try:
        chosen, why = choose_checkpoint(rec, saved, None, keep_best=keep_best)
    except ExportError as exc:
        raise RunError(f"teacher run {rec.run_id}: {exc}") from exc
    files = RunFiles(Path(rec.run_dir))
    evals = read_jsonl(files.evals)
    choice = checkpoint_choice(read_jsonl(files.validation), evals, keep_best)
    if choice is not None:
        scores = choice.best if choice.handed_out == "best" else choice.last
        held = scores.held_out_accuracy if scores else None
    else:
        finals = [e for e in evals if e.get("final") and e.get("checkpoint") != BEST]
        held = _accuracy(finals[-1]) if finals else None
    base = str(trainer.get("base_model") or student.base_model)
    return Teacher(chosen.path, base, f"run {rec.run_id}'s {why}", run_id=rec.run_id, held_out_accuracy=held)


def _from_tinker_path(path: str, student: Student, runs: list[RunRecord]) -> Teacher:
    if student.backend != "tinker":
        raise RunError(f"teacher {path!r} is a Tinker checkpoint; this profile trains locally: name a run or folder")
    for rec in runs:
        if any(c.path == path for c in sampler_checkpoints(rec)):
            teacher = _from_run(rec, student)
            return Teacher(path, teacher.base_model, f"run {rec.run_id}'s checkpoint {path}", run_id=rec.run_id)
    raise RunError(
        f"teacher {path!r} is no checkpoint of this server's runs, so its base model (and tokenizer) cannot be "
        "checked: name the run's id (rl_list_runs), or a base model"
    )


def _from_model(value: str, student: Student) -> Teacher:
    """A base model, or (local) a folder: a model's, or an adapter's (its base from adapter_config.json)."""
    if student.backend == "tinker":
        return Teacher(value, value, f"base model {value}")
    folder = Path(value).expanduser()
    adapter = folder / "adapter_config.json"
    if adapter.is_file():
        try:
            config = json.loads(adapter.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise RunError(f"teacher {value!r}: its adapter_config.json is not JSON ({exc})") from exc
        base = str(config.get("base_model_name_or_path") or "")
        base = offline_model_named(base) or base or student.base_model
        return Teacher(str(folder.resolve()), base, f"the adapter in {folder} (on {base})")
    if offline_model_named(value) is None and not (folder / "config.json").is_file():
        raise RunError(
            f"teacher {value!r} is no run id (rl_list_runs), weights folder, adapter or model this backend loads "
            f"(tiny-chat, smollm2-135m, or a model folder with config.json)"
        )
    ref = value if offline_model_named(value) == value else str(folder.resolve())
    return Teacher(ref, offline_model_named(model_ref(ref)) or ref, f"base model {value}")


def _where(backend: str, self_hosted: bool) -> str:
    return "self-hosted Tinker engine" if self_hosted else "Tinker service" if backend == "tinker" else "local backend"


def _accuracy(line: dict[str, Any]) -> float | None:
    value = line.get("eval_accuracy")
    return float(value) if isinstance(value, (int, float)) else None


def session_teacher(
    schema: ConfigSchema, profile: Profile, state: SessionState, runs: list[RunRecord]
) -> Teacher | None:
    """The teacher the session's config names for a new run (or a fork), resolved; None without one."""
    value, _ = resolve_field(schema, profile, state, "teacher")
    if not value:
        return None
    url, _ = resolve_field(schema, profile, state, "teacher_url")
    student = Student(profile.backend, profile.model, self_hosted=profile.engine is not None)
    return resolve_teacher(str(value), str(url) if url else None, student, runs)
