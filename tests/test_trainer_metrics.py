"""The trainer's metrics sink, W&B mode choice, result.json and the logprob-drift statistic."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tinker import types

from tinker_atropos.run_files import RunResult
from tinker_atropos.trainer.batches import groups_to_datums
from tinker_atropos.trainer.loop import logprob_drift
from tinker_atropos.trainer.metrics import MetricsSink, StepMetrics, wandb_mode

DOC_FIELDS = [
    "step",
    "total_steps",
    "time",
    "loss",
    "reward_mean",
    "reward_std",
    "percent_correct",
    "advantage_mean",
    "advantage_std",
    "logprob_drift",
    "num_sequences",
    "num_datums",
    "tokens",
    "step_seconds",
    "checkpoint",
    "groups",
    "no_signal_share",
    "distinct_reply_share",
    "token_entropy",
    "grad_norm",
    "learning_rate",
    "wait_seconds",
    "forward_backward_seconds",
    "optim_seconds",
    "publish_seconds",
    "reference_seconds",
]


def _metrics(step: int) -> StepMetrics:
    return StepMetrics(
        step=step,
        total_steps=3,
        time=1.5,
        loss=None,
        reward_mean=0.25,
        reward_std=0.1,
        percent_correct=None,
        advantage_mean=0.0,
        advantage_std=0.3,
        logprob_drift=0.001,
        num_sequences=32,
        num_datums=30,
        tokens=4096,
        step_seconds=1.8,
        checkpoint="/x/step-000001",
    )


def test_each_line_is_readable_before_the_sink_closes(tmp_path):
    sink = MetricsSink(tmp_path / "run")
    sink.log(_metrics(1))
    sink.log(_metrics(2))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    assert list(json.loads(lines[0])) == DOC_FIELDS
    assert json.loads(lines[0])["loss"] is None
    sink.close()
    assert sink.wandb_url is None


def test_disabled_wandb_writes_no_files(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    sink = MetricsSink(tmp_path, use_wandb=True)
    sink.log(_metrics(1))
    sink.close()
    assert not (tmp_path / "wandb").exists()


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ({}, "offline"),
        ({"WANDB_API_KEY": "k"}, "online"),
        ({"WANDB_API_KEY": "k", "WANDB_MODE": "offline"}, "offline"),
        ({"WANDB_MODE": "disabled", "WANDB_API_KEY": "k"}, "disabled"),
        ({"WANDB_MODE": "dryrun"}, "offline"),
        ({"WANDB_MODE": "Online"}, "online"),
    ],
)
def test_wandb_mode(env, mode):
    assert wandb_mode(env) == mode


def test_result_json_is_written_whole(tmp_path):
    path = RunResult("stopped", 4, "/a", "/b", "local").write(tmp_path / "run")
    assert json.loads(path.read_text()) == {
        "status": "stopped",
        "steps": 4,
        "final_checkpoint": "/a",
        "final_state": "/b",
        "backend": "local",
        "wandb_url": None,
        "error": None,
        "reason": None,
        "best_checkpoint": None,
        "best_step": None,
    }
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["result.json"]


def test_logprob_drift_counts_completion_tokens_only():
    group = {
        "tokens": [[1, 2, 3, 4], [1, 2, 5]],
        "masks": [[-100, -100, 3, 4], [-100, -100, 5]],
        "scores": [1.0, 0.0],
        "inference_logprobs": [[1.0, 1.0, -1.0, -2.0], [1.0, 1.0, -0.5]],
    }
    conv = groups_to_datums([group])
    trainer_lps = [np.array([-9.0, -1.5, -2.0], np.float32), np.array([-9.0, -0.25], np.float32)]
    output = types.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=[{"logprobs": types.TensorData.from_numpy(a)} for a in trainer_lps],
    )
    # |−1.5 − (−1)| + |−2 − (−2)| + |−0.25 − (−0.5)| over 3 completion tokens; prompt ignored
    # float32 logprobs (exact binary fractions here) summed in float64: approx's default suffices
    assert logprob_drift(output, conv.datums, conv.completion_masks) == pytest.approx(0.75 / 3)
    no_lps = types.ForwardBackwardOutput(loss_fn_output_type="x", loss_fn_outputs=[{}, {}])
    assert logprob_drift(no_lps, conv.datums, conv.completion_masks) is None
