"""A verifiers-v1 rollout's program forked warm against the same program started cold, side by side.

A v1 rollout starts its tool servers (`python -m <module>`) and harness program (`python <script>`)
on the verifiers-v1 venv's interpreter; the child forks them from its warm copy
(`tinker_atropos/verifiers/v1_warm.py`). Stood in for by a script that imports what they import
(verifiers.v1) and exits, started through the runtime's `create_subprocess_exec` both ways,
alternated. Printed: wall seconds from start to exit and the CPU seconds the program used (its own,
after the fork), medians of `--runs`, and warm / cold. Needs `make verifiers-v1`.

    .venv/bin/python bench/v1_warm.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import subprocess
from pathlib import Path

from tinker_atropos.venvs import V1

ROOT = Path(__file__).resolve().parents[1]
V1_PYTHON = V1.python(os.environ)
CHILD_DIR = ROOT / "tinker-atropos" / "tinker_atropos" / "verifiers"
PROGRAM = "import resource, verifiers.v1\nr = resource.getrusage(resource.RUSAGE_SELF)\nprint(r.ru_utime + r.ru_stime)"
MEASURE = r"""
import asyncio, os, statistics, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import v1_warm
import verifiers.v1
runs = int(sys.argv[2])
warm = v1_warm.start(close=[])

async def once(aio, program):
    started = time.monotonic()
    p = await aio.create_subprocess_exec(sys.executable, program, stdout=asyncio.subprocess.PIPE,
                                         env=dict(os.environ), start_new_session=True)
    out, _ = await p.communicate()
    assert p.returncode == 0, p.returncode
    return time.monotonic() - started, float(out.split()[-1])

async def main(program):
    figures = {"cold": [], "warm": []}
    for _ in range(runs):  # alternated, so load drifts hit both alike
        figures["cold"].append(await once(asyncio, program))
        figures["warm"].append(await once(v1_warm._AsyncioWithWarmStarts(warm), program))
    (cw, cc), (ww, wc) = (
        (statistics.median(w for w, _ in figures[h]), statistics.median(c for _, c in figures[h]))
        for h in ("cold", "warm")
    )
    print(f"{'program':<18}{'cold wall':>10}{'warm wall':>10}{'ratio':>7}{'cold cpu':>10}{'warm cpu':>10}{'ratio':>7}")
    print(f"{'verifiers.v1':<18}{cw:>9.2f}s{ww:>9.2f}s{ww / cw:>7.2f}{cc:>9.2f}s{wc:>9.2f}s{wc / cc:>7.2f}")

with tempfile.TemporaryDirectory(prefix="rl-mcp-bench-v1-") as tmp:
    program = os.path.join(tmp, "program.py")
    with open(program, "w") as f:
        f.write(sys.argv[3])
    asyncio.run(main(program))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if not V1_PYTHON.exists():
        print("skipped: run `make verifiers-v1` first (verifiers 0.4.0's venv)")
        return
    command = [str(V1_PYTHON), "-c", MEASURE, str(CHILD_DIR), str(args.runs), PROGRAM]
    subprocess.run(command, check=True)


if __name__ == "__main__":
    main()
