"""The rules on a run with a teacher (trainer.teacher): a teacher no better than the student, and a KL to
the teacher that does not fall.

Distillation pulls the student toward the teacher on every reply token, so it can lift the student at
most to the teacher: one that scored no better on the held-out set before the run has nothing to give.
The reverse KL on the student's own samples (`teacher_kl`) is what the signal minimizes; where it stays
put, the updates are too small to move the student (or the reward's signal pulls another way).
"""

from __future__ import annotations

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts, ends, mean_of, span_of, window_means
from rl_mcp.diagnosis.findings import Evidence, Finding
from rl_mcp.diagnosis.next_steps import edit, raise_learning_rate
from rl_mcp.runs.metrics import series


def teacher_no_better(facts: RunFacts) -> Finding | None:
    teacher = facts.teacher or {}
    held = teacher.get("held_out_accuracy")
    before = next((e.get("eval_accuracy") for e in facts.evals if e.get("step") == 0), None)
    if not isinstance(held, (int, float)) or not isinstance(before, (int, float)) or held > before:
        return None
    who = f"run {teacher['run_id']}" if teacher.get("run_id") else str(teacher.get("ref"))
    title = (
        f"The teacher ({who}) scored {held:.3f} on the held-out set, the student {before:.3f} before training: "
        "distillation pulls the student toward a model no better than itself"
    )
    why = "train on the environment's reward alone, or name a teacher that scores higher (rl_list_runs)"
    evidence = [
        Evidence("eval_accuracy", [0], [float(before)], f"the student before training: {before:.3f}"),
        Evidence("teacher_held_out_accuracy", [], [float(held)], f"the teacher's held-out score: {held:.3f}"),
    ]
    return Finding("teacher_no_better", "warning", title, edit("teacher", None, why), evidence)


def teacher_kl_flat(facts: RunFacts) -> Finding | None:
    points = series(facts.metrics, "teacher_kl")
    if len(points) < t.MIN_TREND_STEPS:
        return None
    first, recent = ends(points)
    before, now = mean_of(first), mean_of(recent)
    if now < t.TEACHER_KL_FALL * before or now < t.TEACHER_KL_CLOSE:
        return None
    coef = facts.trainer.get("distill_coef")
    if isinstance(coef, (int, float)) and coef < 1:
        next_step = edit("distill_coef", 1.0, "a larger share of each token's advantage from the teacher")
    else:
        next_step = raise_learning_rate(facts, "larger updates toward the teacher")
    title = (
        f"The KL to the teacher has not fallen: {now:.3f} nats a token over {span_of(recent)}, {before:.3f} over "
        f"{span_of(first)}"
    )
    return Finding("teacher_kl_flat", "warning", title, next_step, window_means("teacher_kl", first, recent))
