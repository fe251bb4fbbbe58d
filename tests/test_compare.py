"""rl_compare_runs and `mcp-server-rl compare`: two real local runs that differ in their learning rate,
compared through a real MCP client (while they train and once done) and from the shell; and the
figures' definitions on run files written for the purpose (ties, step 0, a paid backend's cost)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from anyio.from_thread import start_blocking_portal
from mcp import Client
from test_runs_mcp import call, environ, serving, wait_status, wait_step

from rl_mcp.runs.compare import compare_runs
from rl_mcp.runs.metrics import MetricsCache
from rl_mcp.runs.store import RunRecord
from rl_mcp.runs.vocab import RunStatus
from tinker_atropos.run_files import RunFiles, append_jsonl, read_jsonl

ROOT = Path(__file__).resolve().parents[1]
EDITS = {"total_steps": 3, "group_size": 4, "batch_size": 8, "learning_rate": 1e-3}
SECOND_LEARNING_RATE = 2e-4
ENDED = {"completed", "failed", "stopped", "lost"}


# --- two real runs, shared by the tests below ----------------------------------------------------


async def _train_two(env: dict[str, str]) -> dict[str, Any]:
    """Run A (learning_rate 1e-3), then run B (2e-4), one at a time; compare them while B trains."""
    async with serving(env) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="letter_repeat")
        for field, value in EDITS.items():
            await call(client, "rl_edit_config", field=field, value=value)
        a = (await call(client, "rl_start_training"))["run_id"]
        assert (await wait_status(client, a, ENDED, timeout=400))["status"] == "completed"
        await call(client, "rl_edit_config", field="learning_rate", value=SECOND_LEARNING_RATE)
        b = (await call(client, "rl_start_training"))["run_id"]
        starting = await call(client, "rl_compare_runs", run_ids=[a, b])
        await wait_step(client, b, 1, timeout=300)
        so_far = await client.call_tool("rl_compare_runs", {"run_ids": [a, b]})
        assert (await wait_status(client, b, ENDED, timeout=400))["status"] == "completed"
    return {"a": a, "b": b, "starting": starting, "so_far": so_far}


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory, introspection_cache: Path) -> Iterator[dict[str, Any]]:
    home = tmp_path_factory.mktemp("compare-home")
    env = environ(home, RL_MCP_CACHE=str(introspection_cache))
    env.pop("RL_MCP_ENV_DIRS", None)
    with start_blocking_portal() as portal:
        runs = portal.call(_train_two, env)
    yield {**runs, "home": home, "env": env}


async def _compare(env: dict[str, str], run_ids: list[str]) -> Any:
    async with serving(env) as (_, server), Client(server) as client:
        return await client.call_tool("rl_compare_runs", {"run_ids": run_ids})


def _png(result: Any) -> bytes:
    images = [c for c in result.content if c.type == "image"]
    assert len(images) == 1 and images[0].mime_type == "image/png"
    return base64.b64decode(images[0].data)


def _png_size(png: bytes) -> tuple[int, int]:
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and png[12:16] == b"IHDR", png[:16]
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


@pytest.mark.anyio
@pytest.mark.slow
async def test_two_runs_side_by_side(two_runs: dict[str, Any]) -> None:
    a, b = two_runs["a"], two_runs["b"]
    # B just started: an answer already, with what there is
    starting = two_runs["starting"]
    assert [r["run_id"] for r in starting["runs"]] == [a, b]
    assert starting["runs"][1]["status"] in ("starting", "running")
    # after B's first step: its figures so far, and a chart
    so_far = two_runs["so_far"]
    assert not so_far.is_error, so_far.content[0].text
    partial = so_far.structured_content["runs"][1]
    assert partial["status"] == "running" and partial["steps_completed"] >= 1 and partial["reward_curve"], partial
    _png_size(_png(so_far))

    result = await _compare(two_runs["env"], [b, a])
    assert not result.is_error, result.content[0].text
    answer = result.structured_content
    assert [r["run_id"] for r in answer["runs"]] == [b, a]  # the order given
    # the one field edited between the two starts, and nothing else
    assert answer["config_differences"] == [
        {"field": "trainer.learning_rate", "values": {b: SECOND_LEARNING_RATE, a: EDITS["learning_rate"]}}
    ]
    width, height = _png_size(_png(result))
    assert width >= 600 and height >= 300

    expected_best: list[tuple[float, int, int, int, str]] = []
    for index, run in enumerate(answer["runs"]):
        files = RunFiles(two_runs["home"] / "runs" / run["run_id"])
        metrics, evals = read_jsonl(files.metrics), read_jsonl(files.evals)
        config = yaml.safe_load(files.config.read_text())
        assert run["status"] == "completed" and run["steps_completed"] == run["total_steps"] == 3
        assert [s for s, _ in run["reward_curve"]] == [1, 2, 3]
        assert run["reward_first"] == metrics[0]["reward_mean"] and run["reward_last"] == metrics[-1]["reward_mean"]
        # the answer rounds: the gain and reward per minute to 4 decimals, seconds to 1 (half a unit each)
        gain = metrics[-1]["reward_mean"] - metrics[0]["reward_mean"]
        assert run["reward_gain"] == pytest.approx(gain, abs=0.5e-4)
        training = sum(m["step_seconds"] + m["wait_seconds"] for m in metrics)
        assert run["training_seconds"] == pytest.approx(training, abs=0.05 + 1e-9)
        assert run["reward_per_minute"] == pytest.approx(
            run["reward_gain"] / (run["training_seconds"] / 60), abs=0.5e-4
        )
        assert run["tokens_trained"] == sum(m["tokens"] for m in metrics) > 0
        assert run["cost_usd"] == 0.0 and run["budget_usd"] is None
        assert (run["backend"], run["model"]) == ("local", "tiny-chat")
        assert run["budget_tokens"] == 3 * 8 * config["env"]["max_token_length"]
        assert run["wall_seconds"] > training
        # the base model at step 0, the final weights at step 3 (the profile's eval_at_end)
        assert run["eval_before"] == evals[0]["eval_accuracy"] and evals[0]["step"] == 0
        assert run["eval_last_step"] == 3 and run["eval_last"] == evals[-1]["eval_accuracy"]
        trained = [(e["eval_accuracy"], e["step"]) for e in evals if e["step"] >= 1]
        best = max(trained, key=lambda t: (t[0], -t[1]))
        assert (run["eval_best"], run["eval_best_step"]) == best
        expected_best.append((-best[0], best[1], run["tokens_trained"], index, run["run_id"]))
    assert answer["best_by_eval"] == min(expected_best)[-1]
    by_rate = max(answer["runs"], key=lambda r: r["reward_per_minute"])
    assert answer["best_by_reward_per_minute"] == by_rate["run_id"]
    assert answer["best_by_eval"] in answer["next_step"] and "rl_export_model" in answer["next_step"]


@pytest.mark.anyio
@pytest.mark.slow
async def test_wrong_asks_say_what_to_do(two_runs: dict[str, Any]) -> None:
    a, b = two_runs["a"], two_runs["b"]
    async with serving(two_runs["env"]) as (_, server), Client(server) as client:

        async def error(run_ids: Any) -> str:
            result = await client.call_tool("rl_compare_runs", {"run_ids": run_ids})
            assert result.is_error, result.structured_content
            return result.content[0].text  # type: ignore[union-attr]

        assert "at least 2" in await error([a])
        assert "at most 8" in await error([a, b, *(f"run-{i}" for i in range(7))])
        bad = await error([a, "../etc/passwd"])
        assert "run_ids.1" in bad and "../etc/passwd" in bad
        unknown = await error([a, "no-such-run"])
        assert "'no-such-run'" in unknown and a in unknown and "rl_list_runs" in unknown
        assert "given twice" in await error([a, b, a])


@pytest.mark.slow
def test_the_command_line_prints_the_same_comparison(two_runs: dict[str, Any], tmp_path: Path) -> None:
    a, b = two_runs["a"], two_runs["b"]
    env = {**two_runs["env"], "PYTHONPATH": f"{ROOT}:{ROOT / 'tinker-atropos'}"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "rl_mcp", "compare", *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)

    chart = tmp_path / "chart.png"
    out = cli(a, b, "--chart", str(chart))
    assert out.returncode == 0, out.stderr
    _png_size(chart.read_bytes())
    lines = out.stdout.splitlines()
    assert lines[0].split()[:3] == ["run", "status", "steps"]
    assert lines[1].startswith(a) and lines[2].startswith(b) and "completed" in lines[1]
    assert f"trainer.learning_rate: {a}=0.001  {b}=0.0002" in out.stdout
    as_json = cli(a, b, "--json")
    assert as_json.returncode == 0, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert f"best by held-out eval: {answer['best_by_eval']}" in out.stdout
    tool = anyio.run(_compare, two_runs["env"], [a, b])
    assert answer == tool.structured_content  # one domain function under both

    missing = cli(a, "no-such-run")
    assert missing.returncode == 1 and "'no-such-run'" in missing.stderr and a in missing.stderr
    assert cli(a).returncode == 1 and "give 2 to 8 run ids" in cli(a).stderr


# --- the definitions, on run files written for the purpose ---------------------------------------


def _run(home: Path, run_id: str, config: dict[str, Any], rewards: list[float], evals: dict[int, float]) -> RunRecord:
    files = RunFiles(home / "runs" / run_id)
    files.run_dir.mkdir(parents=True)
    files.config.write_text(yaml.safe_dump(config))
    for step, reward in enumerate(rewards, start=1):
        row = {"step": step, "reward_mean": reward, "step_seconds": 3.0, "wait_seconds": 1.0, "tokens": 1000}
        append_jsonl(files.metrics, row)
    for step, accuracy in evals.items():
        append_jsonl(files.evals, {"step": step, "eval_accuracy": accuracy, "final": False})
    return RunRecord(
        run_id=run_id, environment="letter_repeat", profile="tinker", status="completed", run_dir=str(files.run_dir),
        config_path=str(files.config), run_name=run_id, total_steps=len(rewards), api_port=1, inference_port=2,
        created_at=1000.0, ended_at=1600.0,
    )  # fmt: skip


def _config(learning_rate: float, port: int) -> dict[str, Any]:
    return {
        "env": {"total_steps": 8, "batch_size": 4, "max_token_length": 100, "group_size": 2,
                "rollout_server_url": f"http://127.0.0.1:{port}", "wandb_name": f"lr-{learning_rate}"},
        "openai": [{"model_name": "Qwen/Qwen3-8B", "base_url": f"http://127.0.0.1:{port + 1}/v1"}],
        "trainer": {"backend": "tinker", "base_model": "Qwen/Qwen3-8B", "learning_rate": learning_rate,
                   "inference_port": port + 1, "run_dir": f"/runs/{port}", "run_name": f"lr-{learning_rate}"},
    }  # fmt: skip


def test_the_definitions_on_written_run_files(tmp_path: Path) -> None:
    steep = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7]  # gain: mean(0.6, 0.7) - mean(0.0, 0.1) = 0.6
    flat = [0.5] * 8
    records = [
        # the base model scored 0.9 at step 0: not a trained result; trained best 0.5 at step 6
        _run(tmp_path, "base-high", config=_config(1e-3, 100), rewards=flat, evals={0: 0.9, 3: 0.2, 6: 0.5}),
        # 0.5 reached at step 4: earlier than base-high's step 6, so it wins the tie
        _run(tmp_path, "early-half", config=_config(1e-4, 200), rewards=steep, evals={0: 0.9, 4: 0.5, 8: 0.5}),
        _run(tmp_path, "no-evals", config=_config(1e-4, 300), rewards=steep[:1], evals={}),
    ]
    comparison = compare_runs(records, MetricsCache(), usd_per_million_tokens=2.0, now=2000.0)
    base_high, early, no_evals = comparison.runs
    # float64 sums of a few recorded values: approx's default rel 1e-6 is far above their rounding
    assert early.reward_gain == pytest.approx(0.6) and early.training_seconds == 8 * (3.0 + 1.0)
    assert early.reward_per_minute == pytest.approx(0.6 / (32 / 60))
    assert base_high.reward_gain == 0.0 and no_evals.reward_gain is None and no_evals.reward_per_minute is None
    assert (base_high.eval_before, base_high.eval_best, base_high.eval_best_step) == (0.9, 0.5, 6)
    assert (early.eval_best, early.eval_best_step, early.eval_last, early.eval_last_step) == (0.5, 4, 0.5, 8)
    assert comparison.best_by_eval == "early-half" and comparison.best_by_reward_per_minute == "early-half"
    # a paid backend: tokens trained so far at the operator's price; the config's budget beside it
    assert early.tokens_trained == 8000 and early.cost_usd == pytest.approx(0.02)
    assert early.budget_tokens == 8 * 4 * 100 and early.budget_usd == pytest.approx(0.01)
    assert (early.backend, early.model) == ("tinker", "Qwen/Qwen3-8B")
    assert early.wall_seconds == 600.0
    assert [(d.field, d.values) for d in comparison.config_differences] == [
        ("trainer.learning_rate", {"base-high": 1e-3, "early-half": 1e-4, "no-evals": 1e-4})
    ]  # names, ports and folders differ in every run and are left out

    # a run still going is measured to now; a run whose config is gone is compared on what is left
    records[2].status, records[2].ended_at = RunStatus.RUNNING, None
    RunFiles(Path(records[2].run_dir)).config.unlink()
    later = compare_runs(records, MetricsCache(), usd_per_million_tokens=None, now=2000.0)
    assert later.runs[2].wall_seconds == 1000.0 and later.runs[2].status == "running"
    assert later.notes and "no-evals" in later.notes[0]
    assert later.runs[0].cost_usd is None  # paid, but no price configured
    fields = {d.field for d in later.config_differences}
    assert "trainer.learning_rate" in fields and "trainer.backend" in fields  # absent in the lost config


def test_ties_and_nothing_to_rank(tmp_path: Path) -> None:
    records = [
        _run(tmp_path, f"twin-{i}", config=_config(1e-3, 100), rewards=[0.1, 0.3], evals={2: 0.4}) for i in range(2)
    ]
    comparison = compare_runs(records, MetricsCache(), usd_per_million_tokens=None)
    assert comparison.best_by_eval == "twin-0" and comparison.best_by_reward_per_minute == "twin-0"
    assert comparison.config_differences == []
    empty = [_run(tmp_path, f"empty-{i}", {}, [], {}) for i in range(2)]
    nothing = compare_runs(empty, MetricsCache(), usd_per_million_tokens=None)
    assert nothing.best_by_eval is None and nothing.best_by_reward_per_minute is None
    assert _png_size(nothing.chart_png())[0] > 0
