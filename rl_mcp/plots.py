"""Reward and loss curves as PNGs, for the image blocks of rl_get_results and rl_compare_runs.

matplotlib is imported inside the function, with the Agg backend, so server start stays fast and
no display is ever needed.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from tinker_atropos.best_checkpoint import BEST

Points = Sequence[tuple[int, float]]  # (step, value)


def reward_loss_png(
    history: list[dict[str, Any]],
    *,
    evals: list[dict[str, Any]] | None = None,
    validation: list[dict[str, Any]] | None = None,
    title: str = "",
) -> bytes:
    """Reward mean (with +/- std band) and loss against step, and the eval accuracy when the run has
    evaluations: the validation curve, the held-out set's points (the best checkpoint's a star)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    steps = [row.get("step", i + 1) for i, row in enumerate(history)]
    reward = [_num(row.get("reward_mean")) for row in history]
    std = [_num(row.get("reward_std")) or 0.0 for row in history]
    loss = [_num(row.get("loss")) for row in history]

    sft_points, eval_points = eval_series([e for e in evals or [] if e.get("checkpoint") != BEST])
    best_points = [
        (int(e["step"]), a)
        for e in evals or []
        if e.get("checkpoint") == BEST and (a := _num(e.get("eval_accuracy"))) is not None
    ]
    val_points = [
        (int(e.get("step") or 0), a) for e in validation or [] if (a := _num(e.get("eval_accuracy"))) is not None
    ]
    panels = 3 if eval_points or sft_points or val_points else 2
    fig = Figure(figsize=(4 * panels, 3.2), dpi=100)
    axes = fig.subplots(1, panels)
    ax_r, ax_l = axes[0], axes[1]
    ax_r.plot(steps, reward, marker="o", markersize=2, color="tab:blue")
    lows = [r - s if r is not None else None for r, s in zip(reward, std)]
    highs = [r + s if r is not None else None for r, s in zip(reward, std)]
    if all(v is not None for v in lows):
        ax_r.fill_between(steps, lows, highs, color="tab:blue", alpha=0.15)
    ax_r.set(title="reward mean", xlabel="step")
    ax_l.plot(steps, loss, marker="o", markersize=2, color="tab:red")
    ax_l.set(title="loss", xlabel="step")
    if eval_points or sft_points or val_points:
        ax_e = axes[2]
        if sft_points:  # the stage's steps before RL's step 0, where it hands over
            ax_e.plot(*zip(*sft_points), marker="s", linestyle="--", color="tab:orange", label="supervised stage")
            eval_points = [sft_points[-1], *eval_points]
        if val_points:
            ax_e.plot(*zip(*val_points), marker=".", color="tab:purple", label="validation")
        if len(eval_points) > (1 if sft_points else 0) or val_points:  # beside a validation curve: points only
            style = {"linestyle": "none"} if val_points else {}
            ax_e.plot(*zip(*eval_points), marker="o", color="tab:green", label="held-out", **style)
        if best_points:
            ax_e.plot(
                *zip(*best_points),
                marker="*",
                markersize=10,
                linestyle="none",
                color="tab:green",
                label="best (held-out)",
            )
        ax_e.set(title="eval accuracy", xlabel="step", ylim=(0, 1))
        if sft_points or val_points:
            ax_e.legend(fontsize=7)
    for ax in axes:
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    return _png(fig)


def eval_series(evals: list[dict[str, Any]]) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """(the supervised stage's evaluations, RL's) as (step, accuracy): the stage's at its step minus
    its length, so that it ends at 0, where RL starts from its weights."""
    rows = [(e, a) for e in evals if (a := _num(e.get("eval_accuracy"))) is not None]
    stage = [(int(e.get("sft_step") or 0), a) for e, a in rows if e.get("stage") == "sft"]
    length = max((k for k, _ in stage), default=0)
    rl = [(int(e.get("step") or 0), a) for e, a in rows if e.get("stage") != "sft"]
    return [(k - length, a) for k, a in stage], rl


def compare_png(curves: Sequence[tuple[str, Points, Points]], *, title: str = "") -> bytes:
    """Runs on one chart, one colour each: (label, reward points, eval points). Mean reward solid
    against the left axis, held-out eval accuracy dashed with markers against the right one."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(8, 4.2), dpi=100)
    ax_r = fig.subplots()
    ax_e = ax_r.twinx()
    colours = [f"C{i}" for i in range(len(curves))]
    for colour, (_, rewards, evals) in zip(colours, curves):
        ax_r.plot([s for s, _ in rewards], [r for _, r in rewards], color=colour, linewidth=1.5)
        ax_e.plot([s for s, _ in evals], [a for _, a in evals], color=colour, linestyle="--", marker="o", markersize=4)
    ax_r.set(xlabel="step", ylabel="reward mean (solid)")
    ax_r.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_e.set(ylabel="held-out eval accuracy (dashed)", ylim=(-0.03, 1.03))
    ax_r.grid(alpha=0.3)
    handles = [Line2D([], [], color=c, linewidth=3, label=label) for c, (label, _, _) in zip(colours, curves)]
    handles += [
        Line2D([], [], color="grey", label="reward mean"),
        Line2D([], [], color="grey", linestyle="--", marker="o", markersize=4, label="eval accuracy"),
    ]
    ax_r.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.12, 1.0), frameon=False)
    if title:
        ax_r.set_title(title, fontsize=9)
    return _png(fig)


def _png(fig: Any) -> bytes:
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
