"""What a local training step leaves resident: supervised steps of SmolLM2-135M-Instruct with the
freed memory handed back after each (the product: tinker_atropos.backends.local.heap) against the
same steps without, each way in a process of its own, one after the other on one machine.

The examples are a supervised set as the stage writes it (`sft/examples.jsonl` in a run folder:
`bench/sft.py` leaves one for mcp:time in each stage arm's run). Printed per step: its seconds,
the resident size after it and the peak so far (VmRSS, VmHWM).

    .venv/bin/python bench/step_memory.py EXAMPLES_JSONL [--steps 4] [--batch 8]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _gb(field: str) -> float:
    line = next(line for line in Path("/proc/self/status").read_text().splitlines() if line.startswith(field))
    return int(line.split()[1]) / 1e6


def steps(examples_file: Path, n: int, batch: int, keep_freed: bool, run_dir: Path) -> None:
    """One arm, in this process: `n` supervised steps, a line each (checkpoints, if any, in `run_dir`)."""
    from tinker import types

    from tinker_atropos.backends.local import LocalTrainingClient, load_base_model, training
    from tinker_atropos.models.paths import SMOLLM2
    from tinker_atropos.sft.steps import batches, sft_step
    from tinker_atropos.sft.supervised_set import read_examples

    if keep_freed:
        training.release_freed_memory = lambda: False  # as before the change
    client = LocalTrainingClient(load_base_model(SMOLLM2, "cpu"), rank=16, run_dir=run_dir, run_name="b", seed=0)
    print(f"  model loaded        resident {_gb('VmRSS:'):5.2f} GB", flush=True)
    adam = types.AdamParams(learning_rate=5e-4)
    for k, chunk in enumerate(batches(read_examples(examples_file), batch, n), start=1):
        started = time.monotonic()
        asyncio.run(sft_step(client, chunk, adam))
        seconds = time.monotonic() - started
        resident, peak = _gb("VmRSS:"), _gb("VmHWM:")
        print(f"  step {k}  {seconds:5.1f} s  resident {resident:5.2f} GB  peak {peak:5.2f} GB", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("examples", type=Path)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--arm", choices=["given-back", "kept"], help=argparse.SUPPRESS)  # a child's own arm
    a = ap.parse_args()
    if a.arm:
        with tempfile.TemporaryDirectory() as run_dir:
            steps(a.examples, a.steps, a.batch, keep_freed=a.arm == "kept", run_dir=Path(run_dir))
        return 0
    for arm in ("given-back", "kept"):
        print(f"{arm}:", flush=True)
        argv = [sys.executable, __file__, str(a.examples), "--steps", str(a.steps), "--batch", str(a.batch)]
        subprocess.run([*argv, "--arm", arm], check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
