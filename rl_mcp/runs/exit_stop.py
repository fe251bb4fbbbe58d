"""The server's exit: supervision ends, and the runs it must stop are stopped by a child that outlives it.

An MCP client quits a stdio server by closing its stdin; the SDK's stdio client (Hermes, tests)
then sends SIGTERM to the server's process group 2 s later and SIGKILL 2 s after that. A trainer
told to stop finishes its step and saves (tens of seconds), and run-api is stopped after it, so a
stop run inside the server is cut short. Instead the server records each run it must stop as
`stopping`, with the reason, and hands them to `python -m rl_mcp.children.stop_runs` in its own
session, out of the client's reach. That child stops each run as rl_stop_training does (environment
-> trainer -> run-api, each process's tree, SIGKILL after the grace), records it `stopped`, and
logs where the server logs, naming any process it could not stop. The server waits for it (up to
EXIT_WAIT_S), so a server that is let exit exits with its runs stopped. A server killed before the
hand-off leaves its runs `stopping`: a restarted server stops them, and re-adopts none of them.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable

import anyio

from rl_mcp.logs import log_fd
from rl_mcp.runs.live import Live
from rl_mcp.runs.store import RunRecord
from rl_mcp.runs.vocab import RunStatus
from rl_mcp.settings import Settings, without_secrets

log = logging.getLogger(__name__)

STOPPER = "rl_mcp.children.stop_runs"
STOP_REASON = "stopped because the server exited (--stop-runs-on-exit)"
STARTING_REASON = "stopped because the server exited while the run was starting; start it again"
ENGINE_EXIT_REASON = (
    "stopped because the server exited, and with it the SkyRL engine the run trains on (runs cannot "
    "outlive it); its saved state resumes with rl_start_training(resume_from=...)"
)
# The stopper's worst case at the default 30 s grace: 10 + 30 + 10 s of grace and 5 s after each
# SIGKILL (environment, trainer, run-api; runs in parallel), plus its own start.
EXIT_WAIT_S = 90.0


async def stop_on_exit(
    settings: Settings,
    lives: list[Live],
    *,
    stop_runs: bool,
    grace_s: float,
    save: Callable[[RunRecord], None],
    reason: str | None = None,
) -> None:
    """End the supervision of `lives`; hand the runs to stop (all active ones with `stop_runs` or a
    `reason` to stop them all, else those still starting, whose start cannot finish without this
    server) to the stopper."""
    for live in lives:
        live.scope.cancel()
    for live in lives:
        await live.done.wait()
    stop_all = stop_runs or reason is not None
    leaving = [live.rec for live in lives if live.rec.active and (stop_all or live.rec.status == RunStatus.STARTING)]
    for rec in leaving:
        rec.error = reason or (STOP_REASON if stop_runs else STARTING_REASON)
        rec.status = RunStatus.STOPPING  # if the hand-off never happens, a restarted server stops it
        save(rec)
    if leaving:
        await _hand_off(settings, [rec.run_id for rec in leaving], grace_s)


async def _hand_off(settings: Settings, run_ids: list[str], grace_s: float) -> None:
    argv = [settings.python, "-m", STOPPER, "--profile", str(settings.profile.source), "--grace-s", str(grace_s)]
    env = {**without_secrets(settings.environ), "RL_MCP_HOME": str(settings.home), "PYTHONUNBUFFERED": "1"}
    out = log_fd()  # None: the child inherits stderr
    try:
        stopper = subprocess.Popen(
            [*argv, *run_ids], stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, start_new_session=True
        )
    except OSError as exc:
        log.error("cannot start the exit stop (%s): runs %s stay stopping until a server starts", exc, run_ids)
        return
    log.info("stopping runs %s in process %d (it outlives this server)", ", ".join(run_ids), stopper.pid)
    with anyio.move_on_after(EXIT_WAIT_S):
        while stopper.poll() is None:
            await anyio.sleep(0.1)
    if stopper.poll() is None:
        log.warning("runs still stopping after %.0f s: process %d goes on alone", EXIT_WAIT_S, stopper.pid)
