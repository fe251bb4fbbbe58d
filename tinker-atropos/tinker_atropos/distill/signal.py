"""The teacher's signal per reply token: distill_coef x (teacher logprob - student logprob), the
negative reverse KL to the teacher on the student's own tokens, beside reward_coef x the environment's
group-relative advantage (tinker-cookbook's on-policy distillation; prime-rl's opd).

Only the reply's targets count (the datum's completion mask): the prompt, the environment's and the
tools' tokens in a multi-turn rollout carry no advantage, so the student is never pulled toward what the
teacher would have said in the environment's place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from tinker import types

from tinker_atropos.trainer.objective import with_advantages


@dataclass(frozen=True)
class TeacherStats:
    """A step's figures: the mean reverse KL estimate per reply token (student logprob - teacher's, on
    the student's samples; it falls as the student comes to sample what the teacher would) and the
    teacher's mean logprob of those tokens (its score of the student's replies)."""

    kl: float | None
    teacher_logprob: float | None


def with_teacher_signal(
    datums: Sequence[types.Datum],
    masks: Sequence[np.ndarray],
    teacher: Sequence[np.ndarray],
    distill_coef: float,
    reward_coef: float,
) -> tuple[list[types.Datum], TeacherStats]:
    """The datums with each reply token's advantage reward_coef x its own + distill_coef x (`teacher`'s
    logprob - the sampler's), and the step's TeacherStats. `teacher[k]` is aligned with datums[k]'s targets."""
    out: list[types.Datum] = []
    gaps: list[np.ndarray] = []
    scores: list[np.ndarray] = []
    for datum, mask, lp_teacher in zip(datums, masks, teacher, strict=True):
        sampled = datum.loss_fn_inputs["logprobs"].to_numpy().astype(np.float64)
        lp_teacher = np.asarray(lp_teacher, dtype=np.float64)
        reply = np.asarray(mask, dtype=bool)
        scored = reply & np.isfinite(lp_teacher)  # a token the teacher left unscored gets no signal of its
        gap = np.where(scored, lp_teacher - sampled, 0.0)
        own = datum.loss_fn_inputs["advantages"].to_numpy().astype(np.float64)
        out.append(with_advantages(datum, np.where(reply, reward_coef * own + distill_coef * gap, 0.0)))
        gaps.append(-gap[scored])
        scores.append(lp_teacher[scored])
    kl = np.concatenate(gaps) if gaps else np.zeros(0)
    score = np.concatenate(scores) if scores else np.zeros(0)
    if not kl.size:
        return out, TeacherStats(None, None)
    return out, TeacherStats(round(float(kl.mean()), 5), round(float(score.mean()), 5))
