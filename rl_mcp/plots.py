"""Reward and loss curves as a PNG, for the image block of rl_get_results.

matplotlib is imported inside the function, with the Agg backend, so server start stays fast and
no display is ever needed.
"""

from __future__ import annotations

import io
from typing import Any


def reward_loss_png(
    history: list[dict[str, Any]], *, evals: list[dict[str, Any]] | None = None, title: str = ""
) -> bytes:
    """Reward mean (with +/- std band) and loss against step, and the held-out eval accuracy when
    the run has evaluations."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    steps = [row.get("step", i + 1) for i, row in enumerate(history)]
    reward = [_num(row.get("reward_mean")) for row in history]
    std = [_num(row.get("reward_std")) or 0.0 for row in history]
    loss = [_num(row.get("loss")) for row in history]

    eval_points = [(e.get("step", 0), _num(e.get("eval_accuracy"))) for e in evals or []]
    eval_points = [(s, a) for s, a in eval_points if a is not None]
    panels = 3 if eval_points else 2
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
    if eval_points:
        ax_e = axes[2]
        ax_e.plot([s for s, _ in eval_points], [a for _, a in eval_points], marker="o", color="tab:green")
        ax_e.set(title="held-out eval accuracy", xlabel="step", ylim=(0, 1))
    for ax in axes:
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None
