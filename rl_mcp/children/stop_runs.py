"""The exit stop: `python -m rl_mcp.children.stop_runs --profile P --grace-s S RUN_ID...`.

A server that exits with runs to stop starts this in its own session (runs/exit_stop.py), so the
client's kill of the server's process group never cuts the stop short. Each run, recorded
`stopping` with the reason, is stopped as rl_stop_training stops it and recorded `stopped` with
that reason; the runs are stopped side by side. Logs go to stderr, which is the server's log.
"""

from __future__ import annotations

import argparse
import logging
import sys

import anyio

from rl_mcp.logs import LOG_FORMAT
from rl_mcp.runs.manager import RunManager
from rl_mcp.runs.vocab import RunStatus
from rl_mcp.settings import Settings

log = logging.getLogger("rl_mcp.exit_stop")


async def stop_runs(settings: Settings, run_ids: list[str], grace_s: float) -> None:
    manager = RunManager(settings, stop_grace_s=grace_s)
    async with anyio.create_task_group() as tg:
        for run_id in run_ids:
            tg.start_soon(_stop, manager, run_id)
    await manager.shutdown(stop_runs=False)


async def _stop(manager: RunManager, run_id: str) -> None:
    rec = manager.get(run_id)
    if rec.status != RunStatus.STOPPING:  # settled meanwhile, e.g. by a server started since
        return
    await manager.stop(run_id, reason=rec.error)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rl_mcp.children.stop_runs")
    parser.add_argument("--profile", required=True, help="the exiting server's profile (a name or a YAML file)")
    parser.add_argument("--grace-s", type=float, required=True, help="the trainer's grace after SIGTERM")
    parser.add_argument("run_ids", nargs="+")
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=LOG_FORMAT)
    anyio.run(stop_runs, Settings.from_env(profile=args.profile), args.run_ids, args.grace_s)
    log.info("exit stop done: %s", ", ".join(args.run_ids))
    return 0


if __name__ == "__main__":
    sys.exit(main())
