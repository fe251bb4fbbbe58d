"""The eval curve of a run with a supervised stage: the stage's evaluations before RL's step 0, where
RL starts from its weights, then RL's own; the PNG draws both."""

from __future__ import annotations

from rl_mcp.plots import eval_series, reward_loss_png

EVALS = [
    {"step": 0, "stage": "sft", "sft_step": 0, "eval_accuracy": 0.0},
    {"step": 0, "stage": "sft", "sft_step": 20, "eval_accuracy": 0.25},
    {"step": 0, "stage": "sft", "sft_step": 40, "eval_accuracy": 0.5},
    {"step": 10, "eval_accuracy": 0.625},
    {"step": 20, "eval_accuracy": 0.75},
]


def test_the_stage_ends_at_step_zero_and_rl_goes_on_from_there(tmp_path) -> None:
    stage, rl = eval_series(EVALS)
    assert stage == [(-40, 0.0), (-20, 0.25), (0, 0.5)] and rl == [(10, 0.625), (20, 0.75)]
    assert eval_series(EVALS[3:]) == ([], [(10, 0.625), (20, 0.75)])
    history = [{"step": s, "reward_mean": 0.1 * s, "reward_std": 0.05, "loss": 1.0 / s} for s in range(1, 21)]
    png = reward_loss_png(history, evals=EVALS, title="sft then rl")
    assert png.startswith(b"\x89PNG") and len(png) > len(reward_loss_png(history, title="sft then rl"))
    (tmp_path / "curve.png").write_bytes(png)
