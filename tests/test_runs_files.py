"""Log tails, change stamps, metrics files, downsampling and the curve image."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rl_mcp.logs import ChangeWatcher, tail_lines
from rl_mcp.plots import reward_loss_png
from rl_mcp.runs import reports
from rl_mcp.runs.metrics import (
    MetricsCache,
    downsample,
    eta_seconds,
    eval_summary,
    latest_metrics,
    wandb_url_from_log,
)
from rl_mcp.runs.store import RunRecord
from rl_mcp.settings import Settings
from tinker_atropos.run_files import JsonlReader, read_result


def test_tail_of_a_big_file_reads_only_its_end(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    with open(path, "w") as fh:
        fh.write("x" * 50_000_000 + "\n")  # 50 MB of one line, then the lines we want
        fh.writelines(f"line {i}\n" for i in range(500))
    started = time.perf_counter()
    lines = tail_lines(path, 200)
    assert time.perf_counter() - started < 0.05
    assert lines == [f"line {i}" for i in range(300, 500)]


def test_tail_edge_cases(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    assert tail_lines(path) == []
    path.write_text("only\nno newline at end")
    assert tail_lines(path, 5) == ["only", "no newline at end"]
    assert tail_lines(path, 1) == ["no newline at end"]
    path.write_bytes(b"bad \xff byte\n")
    assert tail_lines(path) == ["bad \ufffd byte"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab \u00e9", max_size=30), max_size=40), st.integers(0, 45), st.booleans())
def test_tail_equals_naive_tail(tmp_path_factory, lines: list[str], n: int, trailing: bool) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("t") / "f.log"
    text = "\n".join(lines) + ("\n" if trailing and lines else "")
    path.write_text(text)
    assert tail_lines(path, n) == (text.splitlines()[-n:] if n else [])


def test_change_watcher(tmp_path: Path) -> None:
    path = tmp_path / "w.log"
    watch = ChangeWatcher()
    assert not watch.changed(path)  # first look is the baseline
    path.write_text("a\n")
    assert watch.changed(path)
    assert not watch.changed(path)
    with open(path, "a") as fh:
        fh.write("b\n")
    assert watch.changed(path)


def test_jsonl_reader_is_incremental_and_tolerates_partial_lines(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    reader = JsonlReader(path)
    assert reader.refresh() == []
    path.write_text(json.dumps({"step": 1}) + "\n" + '{"step": 2, "lo')
    assert [r["step"] for r in reader.refresh()] == [1]
    with open(path, "a") as fh:
        fh.write('ss": 0.5}\nnot json\n' + json.dumps({"step": 3}) + "\n")
    assert [r["step"] for r in reader.refresh()] == [1, 2, 3]
    path.write_text(json.dumps({"step": 9}) + "\n")  # replaced: read from the start
    assert [r["step"] for r in reader.refresh()] == [9]


def test_downsample_keeps_ends_and_bound() -> None:
    rows = [{"step": i} for i in range(1, 1001)]
    out = downsample(rows, 100)
    assert len(out) == 100 and out[0]["step"] == 1 and out[-1]["step"] == 1000
    assert [r["step"] for r in out] == sorted({r["step"] for r in out})
    assert downsample(rows[:5], 100) == rows[:5]


def test_latest_eta_and_result(tmp_path: Path) -> None:
    metrics = [{"step": i, "time": 100.0 + 2 * i, "loss": 0.1 * i, "reward_mean": i / 10} for i in (1, 2, 3)]
    latest = latest_metrics(metrics, [{"step": 2, "eval_accuracy": 0.4}])
    assert latest["loss"] == 0.1 * 3 and latest["reward_mean"] == 0.3 and latest["eval_accuracy"] == 0.4
    assert latest["percent_correct"] is None
    assert eta_seconds(metrics, 10) == 14.0
    # a budget of training minutes ends it sooner: 0.1 min = 6 s from the first step's start (t=102), 4 s past
    assert eta_seconds([{**m, "step_seconds": 0.0} for m in metrics], 10, budget_minutes=0.1) == 2.0
    # ... and its latest held-out and validation accuracies side by side
    both = latest_metrics(metrics, [{"step": 0, "eval_accuracy": 0.1}], [{"step": 3, "eval_accuracy": 0.5}])
    assert (both["eval_accuracy"], both["validation_accuracy"], both["validation_step"]) == (0.1, 0.5, 3)
    assert eta_seconds(metrics, 3) == 0.0
    assert eta_seconds([], 3) is None
    assert read_result(tmp_path) is None
    (tmp_path / "result.json").write_text('{"status": "completed", "steps": 3}')
    assert read_result(tmp_path) == {"status": "completed", "steps": 3}


def test_curve_png() -> None:
    history = [{"step": i, "reward_mean": i / 5, "reward_std": 0.1, "loss": 1 / i} for i in range(1, 6)]
    png = reward_loss_png(history, title="run")
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    assert reward_loss_png([{"step": 1, "reward_mean": None, "loss": None}]).startswith(b"\x89PNG")
    evals = [{"step": 0, "eval_accuracy": 0.1}, {"step": 5, "eval_accuracy": 0.4}]
    with_evals = reward_loss_png(history, evals=evals, title="run")
    import struct

    width = struct.unpack(">I", with_evals[16:20])[0]  # the PNG header's width: a third panel
    assert width > struct.unpack(">I", png[16:20])[0]


def test_eval_summary_before_after_best() -> None:
    assert eval_summary([]) is None and eval_summary([{"step": 3}]) is None
    evals = [
        {"step": 0, "eval_accuracy": 0.14},
        {"step": 10, "eval_accuracy": 0.31},
        {"step": 20, "eval_accuracy": 0.31},
        {"step": 30, "eval_accuracy": 0.25},
    ]
    summary = eval_summary(evals)
    assert summary is not None
    assert (summary.before, summary.before_step, summary.after, summary.after_step) == (0.14, 0, 0.25, 30)
    assert (summary.best, summary.best_step) == (0.31, 10)  # the earliest step at the best
    assert summary.text == "eval accuracy 0.140 (step 0) -> 0.250 (step 30), best 0.310 at step 10"


def test_wandb_lookup_is_optional_and_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import anyio

    from rl_mcp.runs.wandb_lookup import wandb_summary

    assert anyio.run(wandb_summary, "run", "proj", {}) is None  # no key: W&B is not consulted at all
    environ = {"WANDB_API_KEY": "0" * 40}  # a key, but W&B is unreachable from here
    started = time.perf_counter()
    answer = anyio.run(lambda: wandb_summary("run", "proj", environ, timeout_s=2))
    assert time.perf_counter() - started < 4
    assert set(answer) == {"error"} and "W&B" in answer["error"]


def test_wandb_url_from_the_trainer_log(tmp_path: Path) -> None:
    log = tmp_path / "trainer.log"
    assert wandb_url_from_log(log) is None
    log.write_text("2026 INFO tinker_atropos.trainer.metrics: W&B offline: /runs/x/wandb\n")
    assert wandb_url_from_log(log) is None
    log.write_text(
        "x\n2026 INFO tinker_atropos.trainer.metrics: W&B online: https://wandb.ai/me/rl-mcp/runs/abc12\nmore\n"
    )
    assert wandb_url_from_log(log) == "https://wandb.ai/me/rl-mcp/runs/abc12"


def test_status_explains_a_run_whose_environment_drops_every_group(tmp_path: Path) -> None:
    """A model that never solves the task: atroposlib drops equal-score groups and no step ever comes."""
    (tmp_path / "logs").mkdir()
    env_log = tmp_path / "logs" / "env.log"
    env_log.write_text("Registered with the API\n")
    now = time.time()
    rec = RunRecord(
        run_id="r",
        environment="gsm8k_tinker",
        profile="local",
        status="running",
        run_dir=str(tmp_path),
        config_path=str(tmp_path / "config.yaml"),
        run_name="r",
        total_steps=5,
        api_port=1,
        inference_port=2,
        created_at=now - 90,
        running_at=now - 80,
    )
    cache = MetricsCache()
    server_settings = dataclasses.replace(Settings.from_env(profile="local"), status_min_interval_s=0)
    assert reports.status(rec, {}, cache, server_settings).findings == []
    with env_log.open("a") as f:
        f.write("WARNING Scores are the same in a group, skipping...\n")
    hint = reports.status(rec, {}, cache, server_settings).next_step
    assert "scored the same" in hint and "rl_test_inference" in hint
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "time": now, "reward_mean": 0.5}) + "\n")
    assert reports.status(rec, {}, cache, server_settings).findings == []
    # an environment that sends its equal-score groups: the trainer's share says the same
    with (tmp_path / "metrics.jsonl").open("a") as f:
        f.write(json.dumps({"step": 2, "time": now, "no_signal_share": 0.75, "distinct_reply_share": 0.4}) + "\n")
    status = reports.status(rec, {}, cache, server_settings)
    assert [f.code for f in status.findings] == ["groups_narrowing"]
    assert "75% of groups all-equal" in status.findings[0].evidence[0].summary
    assert "rl_edit_config(field='group_size', value=16)" in status.next_step
    assert status.latest is not None and status.latest.no_signal_share == 0.75
