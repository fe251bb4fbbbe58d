"""How the cores are split between vLLM and the trainer: learning per minute for each split.

On a CPU, the run's vLLM server and its trainer share the cores. Each split is one run of
`bench/learning.py --skip-trl` (the smollm2 profile on `arithmetic`, M training minutes), one after
the other so that none shares the machine with another; the engine's run is the baseline. A split
sets `VLLM_CPU_OMP_THREADS_BIND` (vLLM's engine threads: `auto` binds one core per worker and leaves
the rest to its API server, `0-1` binds both cores of a 2-core machine, `nobind` leaves it to the
OS) and `TINKER_ATROPOS_THREADS` (the trainer's torch threads; by default half the cores).

    .venv/bin/python bench/thread_split.py [--minutes 4] [--splits vllm-auto,vllm-both,...] [--seed 0]

Prints a row per split (steps, median step and its phases, held-out gain, points per minute) and the
rows as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name: (samples with vLLM, environment it adds)
SPLITS: dict[str, tuple[bool, dict[str, str]]] = {
    "engine": (False, {}),
    "vllm-auto": (True, {"VLLM_CPU_OMP_THREADS_BIND": "auto"}),
    "vllm-both-cores": (True, {"VLLM_CPU_OMP_THREADS_BIND": "0-1"}),
    "vllm-auto-trainer-2": (True, {"VLLM_CPU_OMP_THREADS_BIND": "auto", "TINKER_ATROPOS_THREADS": "2"}),
    "vllm-nobind": (True, {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}),
}


def one_split(name: str, minutes: float, seed: int) -> dict[str, object]:
    vllm, extra = SPLITS[name]
    argv = [sys.executable, str(ROOT / "bench" / "learning.py"), "--minutes", str(minutes), "--skip-trl"]
    argv += ["--seed", str(seed)] + (["--vllm"] if vllm else [])
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_CPU_OMP_THREADS_BIND", "TINKER_ATROPOS_THREADS")}
    env.setdefault("RL_MCP_RUNTIMES", str(ROOT / ".runtimes"))  # the checkout's, as `make` exports it
    print(f"[thread_split] {name}: {' '.join(argv[1:])} {extra}", file=sys.stderr, flush=True)
    done = subprocess.run(argv, env={**env, **extra}, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"{name} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    mine = json.loads(lines[-1])
    gain = 100 * (mine["after"] - mine["before"])
    return {
        "split": name,
        **extra,
        "steps": mine["steps"],
        "median_step_seconds": mine["median_step_seconds"],
        "median_phase_seconds": mine["median_phase_seconds"],
        "points": round(gain, 1),
        "points_per_minute": round(gain / minutes, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=4.0)
    ap.add_argument("--splits", default=",".join(SPLITS), help=f"some of {', '.join(SPLITS)}")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rows = [one_split(name, a.minutes, a.seed) for name in a.splits.split(",")]
    for row in rows:
        phases = ", ".join(f"{k.removesuffix('_seconds')} {v:.1f}" for k, v in row["median_phase_seconds"].items())
        print(
            f"{row['split']:>22}: {row['steps']:3d} steps, median step {row['median_step_seconds']:.1f} s "
            f"({phases}), {row['points']:+.1f} points ({row['points_per_minute']:+.2f}/min)"
        )
    for row in rows:
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
