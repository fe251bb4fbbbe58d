"""The run's best checkpoint: the latest trained weights whose validation score is within one
standard error of the highest.

Chosen on the validation split (validation.jsonl), never on the held-out set (eval.jsonl), so the
held-out score of the chosen weights stays an honest test: HF Trainer's `load_best_model_at_end`,
judged on a split the final test never sees. Within one standard error of the top (sqrt(p(1-p)/n):
0.06 at 64 items) the scores are noise, and the latest of them has trained longest: an earlier
checkpoint is chosen only where the curve fell by more than the noise (on arithmetic, a peak of 0.656
at step 19 and 0.641 at step 23 scored 0.500 and 0.578 on the held-out set). The trainer, the
environment and the MCP server all apply this one rule. Stdlib only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

BEST = "best"  # eval.jsonl's `checkpoint` on the held-out line that scores the best checkpoint


@dataclass(frozen=True)
class Scored:
    """One validation evaluation of one set of weights."""

    step: int
    weights: str  # the sampler weights' name: step-000030
    accuracy: float
    items: int | None = None  # the validation set's size


def weights_name(step: int) -> str:
    """The name the trainer gives the sampler weights published after `step` steps."""
    return f"step-{step:06d}"


def validation_scores(rows: list[dict[str, Any]]) -> list[Scored]:
    """validation.jsonl's evaluations of trained weights (step 0, the base model, is no candidate)."""
    out = []
    for row in rows:
        step, acc = row.get("step"), row.get("eval_accuracy")
        if isinstance(step, int) and step > 0 and isinstance(acc, int | float):
            items = row.get("num_items")
            out.append(Scored(step, str(row.get("weights") or weights_name(step)), float(acc), items))
    return out


def weights_path(weights: str, checkpoints: list[dict[str, Any]]) -> str | None:
    """Where the sampler weights `weights` are: its entry in the run's checkpoint index, or `weights`
    itself where it is a path already (a resumed run's lines name its parent's weights by path)."""
    if "/" in weights:
        return weights
    paths = [e["path"] for e in checkpoints if e.get("kind") == "sampler_weights" and e.get("name") == weights]
    return str(paths[-1]) if paths else None


def best_of(rows: list[dict[str, Any]]) -> Scored | None:
    """The latest trained weights within one standard error of the highest validation accuracy."""
    scores = validation_scores(rows)
    if not scores:
        return None
    top = max(scores, key=lambda s: (s.accuracy, s.step))
    noise = math.sqrt(top.accuracy * (1 - top.accuracy) / top.items) if top.items else 0.0
    return max((s for s in scores if s.accuracy >= top.accuracy - noise), key=lambda s: s.step)
