"""A run ends near its best (#76): a learning-rate schedule over the run's own budget, a validation
split apart from training and the held-out set, and the best checkpoint by validation handed out."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import yaml
from mcp import Client
from test_environments import _close, _env
from test_runs_mcp import call, environ, serving, wait_status

from tinker_atropos.best_checkpoint import best_of
from tinker_atropos.environments.splits import carve_validation
from tinker_atropos.run_files import RunFiles, read_jsonl
from tinker_atropos.trainer.config import TinkerConfig
from tinker_atropos.trainer.lr_schedule import budget_progress, learning_rate_at

FALLING_DIR = Path(__file__).parent / "byo_envs" / "falling_validation"


def tinker(**fields: object) -> TinkerConfig:
    base = {"total_steps": 11, "api_url": "http://127.0.0.1:1", "inference_port": 1, "run_dir": "/tmp/x"}
    return TinkerConfig(**{**base, "learning_rate": 1e-3, **fields})


def rates(t: TinkerConfig, steps: range) -> list[float]:
    return [learning_rate_at(t, s, budget_progress(t, s, 0.0)) for s in steps]


def test_the_schedules_values_are_the_hand_computed_ones() -> None:
    assert rates(tinker(), range(1, 12)) == [1e-3] * 11
    # linear, 11 steps, floor 0.1: step s decays by (s - 1) / 10 of the way to 1e-4
    linear = rates(tinker(lr_schedule="linear"), range(1, 12))
    assert linear == pytest.approx([1e-3 - (s - 1) * 0.9e-4 for s in range(1, 12)], rel=1e-12)
    # cosine with 2 warmup steps: 1/3 and 2/3 of the peak, then half a cosine from step 3 to 11
    cosine = rates(tinker(lr_schedule="cosine", lr_warmup_steps=2, lr_floor=0.0), range(1, 12))
    assert cosine[:2] == pytest.approx([1e-3 / 3, 2e-3 / 3], rel=1e-12)
    expected = [0.5e-3 * (1 + math.cos(math.pi * (s - 3) / 8)) for s in range(3, 12)]
    assert cosine[2:] == pytest.approx(expected, rel=1e-12, abs=1e-18)
    # bounded by minutes: 30 of 60 s is half the budget, whatever the steps say
    timed = tinker(lr_schedule="linear", total_steps=100_000, max_training_minutes=1.0)
    assert learning_rate_at(timed, 7, budget_progress(timed, 7, 30.0)) == pytest.approx(1e-3 - 0.5 * 0.9e-3)
    assert learning_rate_at(timed, 8, budget_progress(timed, 8, 90.0)) == pytest.approx(1e-4)  # spent: the floor
    # a warmup as long as the run (a short fork of a run that warms up) rises through every step
    assert rates(tinker(lr_schedule="cosine", lr_warmup_steps=3, total_steps=2), range(1, 3)) == [2.5e-4, 5e-4]


def test_the_validation_split_is_apart_from_training_and_the_held_out_set() -> None:
    pool = [f"p{i % 300}" for i in range(1000)]  # duplicates: every copy of a drawn prompt leaves training
    held_out = [f"p{i}" for i in range(20)]
    train, validation = carve_validation(pool, 25, 7, lambda p: p, held_out)
    assert len(set(validation)) == 25 and not set(validation) & set(train) and not set(validation) & set(held_out)
    assert train == [p for p in pool if p not in validation]  # every copy of a drawn prompt, in order
    assert carve_validation(pool, 25, 7, lambda p: p, held_out) == (train, validation)  # seeded
    assert carve_validation(pool[:90], 25, 7, lambda p: p, held_out)[1] == []  # too few to spare: no split


def test_the_best_is_the_latest_within_the_noise_of_the_top() -> None:
    def rows(*scores: tuple[int, float]) -> list[dict[str, object]]:
        return [{"step": s, "eval_accuracy": a, "num_items": 64, "weights": f"w{s}"} for s, a in scores]

    # arithmetic, seed 0: 0.641 at step 23 is within sqrt(.656 * .344 / 64) = 0.059 of step 19's 0.656
    assert best_of(rows((0, 0.9), (9, 0.5), (19, 0.65625), (23, 0.640625))).step == 23  # type: ignore[union-attr]
    # a fall past the noise: the peak's step (the base model, step 0, is never a candidate)
    assert best_of(rows((10, 0.36), (30, 0.609), (46, 0.469))).weights == "w30"  # type: ignore[union-attr]
    assert best_of(rows((0, 0.2))) is None


@pytest.mark.anyio
async def test_arithmetic_draws_a_validation_set_apart_from_both(tmp_path: Path) -> None:
    from tinker_atropos.environments.arithmetic import ArithmeticEnv

    env = _env(ArithmeticEnv, "http://127.0.0.1:9", tmp_path)
    try:
        await env.setup()
    finally:
        await _close(env)
    train, validation, held_out = (
        {t.prompt for t in ts} for ts in (env.train_tasks, env.validation_tasks, env.eval_tasks)
    )
    assert len(validation) == len(held_out) == 64 and len(env.train_tasks) >= 4096 - 64 * 2
    assert not validation & train and not validation & held_out and not held_out & train


@pytest.mark.anyio
async def test_a_run_that_falls_hands_out_its_best_checkpoint(tmp_path: Path) -> None:
    """The falling environment's evaluations score everything up to step 6 and nothing after: a run
    bounded by 18 s of training, its rate decaying over them, hands out the weights of its peak."""
    env = environ(tmp_path / "home", RL_MCP_ENV_DIRS=str(FALLING_DIR))
    async with serving(env) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="falling_validation")
        edits = {
            "total_steps": 400,
            "group_size": 4,
            "batch_size": 8,
            "max_training_minutes": 0.3,
            "lr_schedule": "linear",
            "lr_warmup_steps": 1,
            "steps_per_eval": 1,
        }
        for field, value in edits.items():
            await call(client, "rl_edit_config", field=field, value=value)
        run = await call(client, "rl_start_training")
        run_id, run_dir = run["run_id"], Path(run["run_dir"])
        done = await wait_status(client, run_id, {"completed", "failed"}, timeout=300)
        assert done["status"] == "completed" and 3 < done["step"] < 400, done
        results = await call(client, "rl_get_results", run_id=run_id)
        assert results["reason"] == "its max_training_minutes are spent"

        # the schedule: half the rate on the warmup step, then a decay that the minutes drive
        lr = yaml.safe_load(Path(run["config_path"]).read_text())["trainer"]["learning_rate"]
        used = [m["learning_rate"] for m in read_jsonl(run_dir / "metrics.jsonl") if m["learning_rate"] is not None]
        assert used[0] == pytest.approx(lr / 2) and used[1] == pytest.approx(lr, rel=0.2)
        assert all(a >= b for a, b in itertools.pairwise(used[1:])) and 0.1 * lr <= used[-1] < 0.8 * lr, used

        # the best by validation, its held-out score beside the last one's; the held-out set was scored
        # before the first step, on the final weights and on the best only
        choice = results["checkpoint_choice"]
        best, last = choice["best"], choice["last"]
        assert choice["handed_out"] == "best" and best["validation_accuracy"] == 1.0, choice
        assert last["validation_accuracy"] == 0.0 and best["step"] < last["step"] == done["step"], choice
        assert best["held_out_accuracy"] == 0.0 and last["held_out_accuracy"] == 0.0  # scored after the fall
        held = read_jsonl(RunFiles(run_dir).evals)
        assert [(e["step"], e["final"], e.get("checkpoint")) for e in held] == [
            (0, False, None),
            (last["step"], True, None),
            (best["step"], True, "best"),
        ]
        assert best_of(read_jsonl(RunFiles(run_dir).validation)).weights == best["weights"]  # type: ignore[union-attr]
        outcome = json.loads((run_dir / "result.json").read_text())
        assert outcome["best_step"] == best["step"] and results["final_weights"] == outcome["best_checkpoint"]
        assert outcome["best_checkpoint"].endswith(best["weights"])

        # the finding names the fall and its size; the rate already decays, so a lower one next
        regressed = {f["code"]: f for f in results["findings"]}["eval_regressed"]
        assert "validation eval fell 100 points" in regressed["title"] and "stayed down" in regressed["title"]
        assert regressed["next_step"]["arguments"] == {"field": "learning_rate", "value": float(f"{lr / 10:.3g}")}

        # export takes the best by default
        exported = await call(client, "rl_export_model", run_id=run_id, format="adapter")
        assert exported["checkpoint_step"] == best["step"] and "best validation" in exported["chosen_because"]
        weights = "adapter_model.safetensors"
        assert (Path(exported["folder"]) / weights).read_bytes() == (
            Path(outcome["best_checkpoint"]) / weights
        ).read_bytes()

        # a fork keeps the choice: its seeded lines name the parent's weights by path
        fork = await call(client, "rl_start_training", resume_from=run_id, fork=True)
        await call(client, "rl_stop_training", run_id=fork["run_id"])
        seeded = read_jsonl(RunFiles(Path(fork["run_dir"])).validation)
        assert best_of(seeded).weights == outcome["best_checkpoint"]  # type: ignore[union-attr]
        assert yaml.safe_load(Path(fork["config_path"]).read_text())["trainer"]["keep_best"] is True
