"""Does training train? SmolLM2-135M-Instruct on the `arithmetic` environment for M minutes.

1. This project, through the MCP tools exactly as an agent: `mcp-server-rl serve` over stdio on the
   bundled `smollm2` profile, rl_select_environment arithmetic, rl_edit_config,
   rl_start_training, rl_check_status until the budget is spent, rl_stop_training,
   rl_get_results.
1b. With --skyrl, the same through self-hosted Tinker: the `skyrl` profile, whose runs train through
   the tinker SDK on SkyRL's Tinker-API engine (JAX on this CPU), the same settings and budget; its
   final weights come out through rl_export_model (downloaded from the engine) to be scored.
1c. With --vllm, this project's run samples with vLLM's server (the smollm2 profile with
   `trainer.sampler: vllm`, written into the bench's home; the vllm runtime: `make vllm`).
2. TRL's GRPOTrainer (bench/baselines/trl_grpo.py, installed into .venv-bench from
   bench/baselines/requirements-trl.txt): the same model, task, reward, group size, batch,
   learning rate, LoRA rank and budget.

Both budgets count training only, as TRL's trainer measures it: from the end of the base model's
eval, without the model load and without the evals (the run's periodic evals, read from the
`seconds` of each eval.jsonl line, stop its training while they run). Both sides' final weights
are then scored by the same code (bench/baselines/heldout.py: the held-out set, prompt and greedy
decoding); the run's own evals give its curve.

    .venv/bin/python bench/learning.py [--minutes 30] [--skip-trl] [--skip-ours] [--skyrl] [--vllm] [--trl-threads N]

Without --skip-*, the two sides run one after the other, each alone. To run them side by side,
start one process with --skip-trl and one with --skip-ours --trl-threads 1.

This project's run gets the budget as its own `max_training_minutes` (its learning-rate schedule
decays over them) and ends itself; its last and its best checkpoint (by the validation split) are both
scored on the held-out set. The last line: this project's figures as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import yaml
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from rl_mcp import interrupts
from rl_mcp.demo import call, server_environment
from tinker_atropos.run_files import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
BENCH_VENV = ROOT / ".venv-bench"
MODEL = "smollm2-135m"
# The same for both sides (env fields and tinker fields of rl_edit_config).
SETTINGS: dict[str, Any] = {
    "group_size": 8,
    "batch_size": 32,
    "max_completion_tokens": 16,
    "eval_size": 64,
    "level": 1,
    "eval_seed": 1234,
    "learning_rate": 3e-4,
    "lora_rank": 16,
}
# This project only: clipped ratios (TRL's GRPO loss clips too), rollouts at most one step behind
# the weights being trained, and the held-out eval every 10 steps.
OURS_ONLY: dict[str, Any] = {"loss_fn": "ppo", "max_batches_offpolicy": 1, "steps_per_eval": 10}
SKYRL_SIDE = "rl-mcp on SkyRL's Tinker engine"


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def training_seconds(run_dir: Path) -> float:
    """Seconds trained so far: from the end of the step-0 evals (held-out and validation), less the
    evals since (0 before)."""
    evals = [e for name in ("eval.jsonl", "validation.jsonl") for e in read_jsonl(run_dir / name) if not e.get("final")]
    zero = [e["time"] for e in evals if e["step"] == 0]
    if not zero:
        return 0.0
    return time.time() - max(zero) - sum(e["seconds"] for e in evals if e["time"] > max(zero))


def checkout_server(home: Path, profile: str, env: dict[str, str]) -> StdioServerParameters:
    """This checkout's server over stdio (python -m from the repository root, whatever rl-mcp is
    installed), on `profile`, stopping its runs when it exits, its log in `home`."""
    return StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "rl_mcp",
            "serve",
            "--profile",
            profile,
            "--stop-runs-on-exit",
            "--log-file",
            str(home / "server.log"),
        ],
        env={**env, "PYTHONPATH": f"{ROOT}:{ROOT / 'tinker-atropos'}"},
        cwd=ROOT,
    )


async def train_through_mcp(
    minutes: float,
    home: Path,
    environment: str,
    edits: dict[str, Any],
    *,
    training_clock: bool = False,
    profile: str = "smollm2",
    may_complete: bool = False,
    checkpoints: tuple[str, ...] = ("final",),
) -> tuple[Path, dict[str, Path]]:
    """Select, edit, start and watch a run on `profile` for `minutes`, then stop it: returns its run
    directory and its `checkpoints` (final, best) as PEFT adapter folders. The minutes count from
    rl_start_training, or with `training_clock` as training_seconds counts them; a run given its own
    budget (`max_training_minutes` in `edits`) ends itself. `may_complete`: a run that completes
    before the budget (every item retired) ends the watch; else it is an error."""
    params = checkout_server(home, profile, server_environment(home))
    may_complete = may_complete or "max_training_minutes" in edits
    async with Client(params, read_timeout_seconds=900) as client:
        await call(client, "rl_select_environment", {"name": environment})
        for field, value in {**edits, "total_steps": 100_000}.items():
            await call(client, "rl_edit_config", {"field": field, "value": value})
        started, _ = await call(client, "rl_start_training")
        run_id, run_dir = started["run_id"], Path(started["run_dir"])
        t0 = time.monotonic()
        log(f"{environment}: run {run_id} in {run_dir}")
        status: dict[str, Any] = {}
        while (training_seconds(run_dir) if training_clock else time.monotonic() - t0) < minutes * 60:
            status, _ = await call(client, "rl_check_status", {"run_id": run_id})
            if may_complete and status.get("status") == "completed":
                break
            if status.get("status") in ("failed", "lost", "completed", "stopped"):
                raise RuntimeError(f"run ended early: {status.get('status')} {status.get('error')}")
            await anyio.sleep(5)
        ended = ("completed", "failed", "stopped", "lost")
        while "max_training_minutes" in edits and status.get("status") not in ended:  # it ends itself
            status, _ = await call(client, "rl_check_status", {"run_id": run_id})
            await anyio.sleep(2)
        if status.get("status") not in ended:
            await call(client, "rl_stop_training", {"run_id": run_id})
        folders = {}
        for checkpoint in checkpoints:
            wanted = {"run_id": run_id, "format": "adapter", "checkpoint": checkpoint}
            exported, _ = await call(client, "rl_export_model", wanted)
            folders[checkpoint] = Path(exported["folder"])
    return run_dir, folders


def overrides(items: list[str]) -> dict[str, Any]:
    """`--set FIELD=JSON` arguments as a dict."""
    pairs = (item.partition("=") for item in items)
    return {field: json.loads(value) for field, _, value in pairs}


def read_run(run_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(metrics lines, eval lines) of a run directory."""
    metrics, evals = (read_jsonl(run_dir / name) for name in ("metrics.jsonl", "eval.jsonl"))
    if not evals:
        raise RuntimeError(f"no eval.jsonl lines in {run_dir}")
    return metrics, evals


def step_figures(metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """Step count, median step seconds and the median of each phase, over steps that trained."""
    trained = [m for m in metrics if m["num_datums"]]
    phases = ("wait_seconds", "forward_backward_seconds", "optim_seconds", "publish_seconds")
    return {
        "steps": len(metrics),
        "median_step_seconds": statistics.median(m["step_seconds"] for m in trained) if trained else None,
        "median_phase_seconds": {p: statistics.median(m[p] for m in trained) for p in phases} if trained else {},
    }


async def ours(minutes: float, home: Path, profile: str = "smollm2") -> dict[str, Any]:
    """The run on its own budget of training minutes (its learning-rate schedule decays over them), its
    last and its best checkpoint (by validation) both scored on the held-out set by heldout.py."""
    edits = {**SETTINGS, **OURS_ONLY, "max_training_minutes": minutes}
    if profile == "skyrl":
        edits.pop("lora_rank")  # the profile locks it, at the same rank
    run_dir, folders = await train_through_mcp(
        minutes, home, "arithmetic", edits, training_clock=True, profile=profile, checkpoints=("final", "best")
    )
    metrics, evals = read_run(run_dir)
    validation = read_jsonl(run_dir / "validation.jsonl")
    after = await held_out_accuracy(folders["final"])
    same = [(folders[c] / "adapter_model.safetensors").read_bytes() for c in ("final", "best")]
    best = after if same[0] == same[1] else await held_out_accuracy(folders["best"])
    trained = [e for e in validation if e["step"] > 0]
    return {
        "before": evals[0]["eval_accuracy"],
        "after": after,
        "after_best": best,
        "best_checkpoint": folders["best"].name,
        "validation_by_step": {e["step"]: e["eval_accuracy"] for e in validation},
        "validation_peak": max((e["eval_accuracy"] for e in trained), default=None),
        "validation_final": trained[-1]["eval_accuracy"] if trained else None,
        "held_out_by_step": {e["step"]: e["eval_accuracy"] for e in evals},
        "eval_seconds": sum(e["seconds"] for e in [*evals, *validation] if e["step"] > 0),
        **step_figures(metrics),
        "run_dir": str(run_dir),
    }


async def held_out_accuracy(adapter: Path) -> float:
    """The final weights scored by heldout.py, the code that scores TRL's."""
    from tinker_atropos.models import resolve_model

    s = SETTINGS
    argv = [str(await ensure_bench_venv()), str(ROOT / "bench" / "baselines" / "heldout.py"), "--model"]
    argv += [resolve_model(MODEL), "--adapter", str(adapter), "--max-tokens", str(s["max_completion_tokens"])]
    argv += ["--eval-size", str(s["eval_size"]), "--level", str(s["level"]), "--eval-seed", str(s["eval_seed"])]
    return float((await last_json_line(argv))["accuracy"])


async def last_json_line(argv: list[str]) -> dict[str, Any]:
    """A baseline script's answer, the last line of its stdout (the script is killed if the bench is stopped)."""
    out = await anyio.run_process(argv, env=bench_env(), stderr=None)
    answer: dict[str, Any] = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return answer


def bench_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT / "tinker-atropos"), HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")


async def ensure_bench_venv() -> Path:
    python = BENCH_VENV / "bin" / "python"
    if not python.exists():
        log("creating .venv-bench (torch's CPU wheel first, then TRL)")
        requirements = ROOT / "bench" / "baselines" / "requirements-trl.txt"
        for argv in (
            [sys.executable, "-m", "venv", str(BENCH_VENV)],
            [str(python), "-m", "pip", "install", "-q", "torch==2.13.0"],
            [str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
        ):
            await anyio.run_process(argv, stdout=None, stderr=None)
    return python


async def trl(minutes: float, threads: int, seed: int) -> dict[str, Any]:
    from tinker_atropos.models import resolve_model

    s = SETTINGS
    argv = [
        str(await ensure_bench_venv()),
        str(ROOT / "bench" / "baselines" / "trl_grpo.py"),
        "--model",
        resolve_model(MODEL),
        "--minutes",
        str(minutes),
        "--lr",
        str(s["learning_rate"]),
        "--rank",
        str(s["lora_rank"]),
        "--group-size",
        str(s["group_size"]),
        "--batch-size",
        str(s["batch_size"]),
        "--max-tokens",
        str(s["max_completion_tokens"]),
        "--eval-size",
        str(s["eval_size"]),
        "--level",
        str(s["level"]),
        "--eval-seed",
        str(s["eval_seed"]),
        "--threads",
        str(threads),
        "--seed",
        str(seed),
    ]
    return await last_json_line(argv)


def points(r: dict[str, Any]) -> float:
    return 100 * (r["after"] - r["before"])


def vllm_profile(home: Path) -> str:
    """The smollm2 profile with its runs sampled by vLLM's server (`trainer.sampler: vllm`), as a file."""
    profile = yaml.safe_load((ROOT / "rl_mcp" / "profiles" / "smollm2.yaml").read_text())
    profile["name"] = "smollm2-vllm"
    profile["locked"]["trainer"]["sampler"] = "vllm"
    path = home / "smollm2-vllm.yaml"
    path.write_text(yaml.safe_dump(profile))
    return str(path)


async def all_sides(a: argparse.Namespace, home: Path) -> dict[str, dict[str, Any]]:
    """This project's figures (local backend, then self-hosted Tinker with --skyrl), then TRL's."""
    sides: dict[str, dict[str, Any]] = {}
    if not a.skip_ours:
        name, profile = ("rl-mcp (vLLM)", vllm_profile(home)) if a.vllm else ("rl-mcp", "smollm2")
        sides[name] = await ours(a.minutes, home / "local", profile=profile)
        log(f"ours: {json.dumps(sides[name])}")
    if a.skyrl:
        sides[SKYRL_SIDE] = await ours(a.minutes, home / "skyrl", profile="skyrl")
        log(f"skyrl: {json.dumps(sides[SKYRL_SIDE])}")
    if not a.skip_trl:
        sides["TRL"] = await trl(a.minutes, a.trl_threads, a.seed)
    return sides


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--skip-trl", action="store_true")
    ap.add_argument("--skip-ours", action="store_true")
    ap.add_argument("--skyrl", action="store_true", help="also train through self-hosted Tinker (skyrl profile)")
    ap.add_argument("--vllm", action="store_true", help="ours samples with vLLM's server (trainer.sampler: vllm)")
    ap.add_argument(
        "--trl-threads", type=int, default=0, help="TRL's torch threads: 1 beside rl-mcp, 0 (every core) alone"
    )
    ap.add_argument("--home", type=Path, default=None, help="state dir of the bench's server")
    ap.add_argument("--seed", type=int, default=0, help="both sides' seed (ours: the run's `seed`; TRL's)")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", help="override a setting")
    a = ap.parse_args()
    OURS_ONLY["seed"] = a.seed
    for field, value in overrides(a.set).items():
        (SETTINGS if field in SETTINGS else OURS_ONLY)[field] = value
    home = (a.home or Path(tempfile.mkdtemp(prefix="rl-mcp-bench-"))).resolve()
    home.mkdir(parents=True, exist_ok=True)
    sides = interrupts.run(all_sides, a, home)  # a signal stops the runs and TRL's process first
    base = sides.pop("TRL", None)
    if base:
        print(
            f"TRL GRPOTrainer: eval accuracy before {base['before']:.3f} after {base['after']:.3f} "
            f"({points(base):+.1f} points) in {a.minutes:g} min, {base['steps']} steps, "
            f"median step {base['median_step_seconds']:.1f} s ({points(base) / a.minutes:+.2f} points/min)"
        )
        print(json.dumps({"side": "TRL", "seed": a.seed, **base}))
    for name, mine in sides.items():
        phases = ", ".join(f"{k.removesuffix('_seconds')} {v:.2f} s" for k, v in mine["median_phase_seconds"].items())
        print(
            f"{name}: {mine['steps']} steps, median step {mine['median_step_seconds']} s ({phases}), "
            f"{mine['eval_seconds']:.0f} s in evals off the clock ({points(mine) / a.minutes:+.2f} points/min); "
            f"validation by step: {mine['validation_by_step']} (peak {mine['validation_peak']}, final "
            f"{mine['validation_final']}); best checkpoint {mine['best_checkpoint']}"
        )
        best = 100 * (mine["after_best"] - mine["before"])
        print(
            f"{name}: eval accuracy before {mine['before']:.3f} after {mine['after']:.3f} "
            f"({points(mine):+.1f} points) in {a.minutes:g} min; best checkpoint {mine['after_best']:.3f} ({best:+.1f})"
        )
        print(json.dumps({"side": name, "seed": a.seed, **{k: v for k, v in mine.items() if k != "run_dir"}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
