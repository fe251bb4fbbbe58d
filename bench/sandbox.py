"""What a sandbox costs: `local` and `bwrap` side by side in one run.

Three figures per backend: a trivial command in an open sandbox (what every terminal call of a
rollout pays), a sandbox opened, given one trivial command and closed (what a rollout pays on
top), and 32 of those at once (a group of rollouts). The bwrap column's extra over local per
command is the number to watch (goal: at most 20 ms at p50).

    .venv/bin/python bench/sandbox.py [--runs 50] [--group 32]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from rl_mcp import interrupts
from tinker_atropos.agent.sandboxes import SandboxConfig, open_sandbox
from tinker_atropos.agent.sandboxes.bwrap import probe

COMMAND = "echo ok"


async def per_command(backend: str, runs: int) -> list[float]:
    async with open_sandbox(SandboxConfig(backend=backend)) as sb:
        await sb.run(COMMAND)  # warm
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            result = await sb.run(COMMAND)
            times.append(time.perf_counter() - started)
            assert result.output.strip() == "ok", result
    return times


async def open_run_close(backend: str) -> float:
    started = time.perf_counter()
    async with open_sandbox(SandboxConfig(backend=backend)) as sb:
        result = await sb.run(COMMAND)
    assert result.output.strip() == "ok", result
    return time.perf_counter() - started


async def lifecycle(backend: str, runs: int) -> list[float]:
    return [await open_run_close(backend) for _ in range(runs)]


async def group(backend: str, size: int) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(open_run_close(backend) for _ in range(size)))
    return time.perf_counter() - started


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if len(values) > 1 else values[0] * 1000


async def main(runs: int, size: int) -> None:
    backends = ["local"] + (["bwrap"] if probe() is None else [])
    if len(backends) == 1:
        print(f"bwrap is not available here: {probe()}")
    rows: dict[str, dict[str, float]] = {}
    for backend in backends:
        cmd = await per_command(backend, runs)
        life = await lifecycle(backend, runs)
        rows[backend] = {
            "command p50 ms": pct(cmd, 50),
            "command p95 ms": pct(cmd, 95),
            "open+command+close p50 ms": pct(life, 50),
            "open+command+close p95 ms": pct(life, 95),
            f"{size} at once, wall ms": await group(backend, size) * 1000,
        }
    print(f"{'':<28}" + "".join(f"{b:>12}" for b in backends) + ("  bwrap - local" if len(backends) == 2 else ""))
    for key in rows["local"]:
        line = f"{key:<28}" + "".join(f"{rows[b][key]:>12.1f}" for b in backends)
        if len(backends) == 2:
            line += f"  {rows['bwrap'][key] - rows['local'][key]:>+13.1f}"
        print(line)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--group", type=int, default=32)
    args = parser.parse_args()
    interrupts.run(main, args.runs, args.group)  # a signal closes the open sandboxes first
