"""A child forked from a warm template against the same child started cold, side by side.

Each kind of heavy child is stood in for by a script that imports what that child imports before
its first line of work (the trainer: `tinker_atropos.trainer.launch` and the local backend; an environment
process: atroposlib's BaseEnv and the product's env_process helpers; the inference server), then
exits. Both ways go through `rl_mcp.processes.spawn`, as runs and rl_test_inference start them;
cold is `RL_MCP_WARM_START=0`. Printed: wall seconds from spawn to exit, and the CPU seconds the child
used (its own, after the fork), medians of `--runs`, and warm / cold.

    .venv/bin/python bench/warm_start.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rl_mcp import processes, warm_start

KINDS = {
    "trainer": "import tinker_atropos.trainer.launch, tinker_atropos.backends.local",
    "environment": "import atroposlib.envs.base; from tinker_atropos.env_process import atropos_compat, health, logs",
    "inference server": "import tinker_atropos.inference_server",
}
REPORT = "import resource; r = resource.getrusage(resource.RUSAGE_SELF); print(r.ru_utime + r.ru_stime)"


def once(folder: Path, code: str, env: dict[str, str]) -> tuple[float, float]:
    script = folder / "child.py"
    script.write_text(f"{code}\n{REPORT}\n")
    log = folder / "child.log"
    log.unlink(missing_ok=True)
    started = time.monotonic()
    child = processes.spawn("bench", [sys.executable, str(script)], log_path=log, env=env, cwd=folder)
    while child.running:
        time.sleep(0.01)
    wall = time.monotonic() - started
    if child.poll() != 0:
        raise SystemExit(f"the child failed:\n{log.read_text()}")
    return wall, float(log.read_text().split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled"}
    env.pop("RL_MCP_WARM_START", None)
    started = time.monotonic()
    warm_start.prepare(sys.executable, env)
    while not warm_start.ready(sys.executable, env):
        time.sleep(0.05)
    print(f"template ready in {time.monotonic() - started:.1f} s (once per server, in the background)")
    print(f"{'child':<18}{'cold wall':>10}{'warm wall':>10}{'ratio':>7}{'cold cpu':>10}{'warm cpu':>10}{'ratio':>7}")
    with tempfile.TemporaryDirectory(prefix="rl-mcp-bench-warm-") as tmp:
        for kind, code in KINDS.items():
            figures: dict[str, list[tuple[float, float]]] = {"cold": [], "warm": []}
            for _ in range(args.runs):  # alternated, so load drifts hit both alike
                figures["cold"].append(once(Path(tmp), code, {**env, "RL_MCP_WARM_START": "0", "TMPDIR": tmp}))
                figures["warm"].append(once(Path(tmp), code, {**env, "TMPDIR": tmp}))
            (cw, cc), (ww, wc) = (
                (statistics.median(w for w, _ in figures[h]), statistics.median(c for _, c in figures[h]))
                for h in ("cold", "warm")
            )
            print(f"{kind:<18}{cw:>9.2f}s{ww:>9.2f}s{ww / cw:>7.2f}{cc:>9.2f}s{wc:>9.2f}s{wc / cc:>7.2f}")
    warm_start.stop_templates()


if __name__ == "__main__":
    main()
