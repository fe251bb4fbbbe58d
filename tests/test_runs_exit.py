"""A client quits a stdio server by closing its stdin (as Claude Desktop and Hermes do; the SDK's client
then sends SIGTERM 2 s later and SIGKILL 2 s after that). With --stop-runs-on-exit nothing of a
running run is left and it is recorded `stopped` with the reason; without it, runs go on and a
restarted server re-adopts them. Real `mcp-server-rl serve` over stdio, real runs on the local profile.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from test_runs_mcp import _adoptable, alive, call, configure, environ, serving, tree_pids, wait_step

from rl_mcp.runs.store import RunStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
NEVER_FINISHES_DIR = Path(__file__).resolve().parent / "byo_envs" / "never_finishes"


def stdio_server(env: dict[str, str], *flags: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "rl_mcp", "serve", *flags], env=env, cwd=str(ROOT))


def listening_ports(procs: list[psutil.Process]) -> set[int]:
    ports: set[int] = set()
    for proc in procs:
        try:
            ports |= {c.laddr.port for c in proc.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            pass
    return ports


def listeners(ports: set[int]) -> list[str]:
    """Whatever listens on one of `ports` now, on any address (a connection in TIME_WAIT does not)."""
    conns = psutil.net_connections(kind="inet")
    return [f"{c.laddr} pid {c.pid}" for c in conns if c.status == psutil.CONN_LISTEN and c.laddr.port in ports]


async def test_closing_stdin_stops_every_process_of_every_run(tmp_path: Path) -> None:
    """Two runs at once: one stepping, one whose environment never finishes a rollout (its trainer
    waits for a first batch). The client closes stdin while both run."""
    home = tmp_path / "home"
    env = environ(home, RL_MCP_ENV_DIRS=str(NEVER_FINISHES_DIR))
    log = tmp_path / "server.log"
    tree: list[psutil.Process] = []
    try:
        with log.open("w") as errlog:
            params = stdio_server(env, "--stop-runs-on-exit")
            async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
                runs = []
                for environment in ("letter_repeat", "never_finishes"):
                    await configure(client, environment)
                    await call(client, "rl_edit_config", field="total_steps", value=100)
                    runs.append(await call(client, "rl_start_training", wait=True))
                    assert runs[-1]["status"] == "running", runs[-1]
                stepping, waiting = (run["run_id"] for run in runs)
                statuses = [await wait_step(client, stepping, 1, timeout=120)]
                statuses.append(await call(client, "rl_check_status", run_id=waiting))
                assert statuses[1]["status"] == "running" and statuses[1]["step"] == 0, statuses[1]
                tree = [proc for status in statuses for proc in tree_pids(status)]
                ports = listening_ports(tree)
                for run, status in zip(runs, statuses, strict=True):
                    assert {p["name"] for p in status["processes"]} == {"api", "trainer", "env"}
                    assert {run["ports"]["api"], run["ports"]["inference"]} <= ports, (run["ports"], ports)
                closed = anyio.current_time()  # leaving the block closes stdin
        store = RunStore(home / "runs.sqlite")
        with anyio.fail_after(60):  # the stop goes on after the server is gone: wait for its end
            while alive(tree) or any(store.get(run["run_id"]).active for run in runs):  # type: ignore[union-attr]
                await anyio.sleep(0.2)
        stopped_in = anyio.current_time() - closed
        assert listeners(ports) == []
        text = log.read_text()
        assert "could not stop" not in text, text
        for run in runs:
            rec = store.get(run["run_id"])
            assert rec is not None and rec.status == "stopped", rec
            assert rec.error and "--stop-runs-on-exit" in rec.error
            assert all(proc.exit_code is not None for proc in rec.processes.values()), rec.processes
            assert f"run {rec.run_id} stopped" in text, text
        async with serving(env, stop_runs_on_exit=False) as (app, _):  # a restarted server adopts nothing
            assert app.runs.supervised() == []
        print(f"every process of both runs gone {stopped_in:.1f} s after the client closed stdin")
    finally:
        for proc in alive(tree):  # whatever happened, leave nothing running
            proc.kill()


async def test_closing_stdin_without_the_flag_leaves_runs_going(tmp_path: Path) -> None:
    home = tmp_path / "home"
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        store = RunStore(home / "runs.sqlite")
        store.insert(_adoptable(home, "lives-on", trainer))
        env = environ(home)
        with (tmp_path / "server.log").open("w") as errlog:
            async with Client(stdio_client(stdio_server(env), errlog=errlog), mode="legacy") as client:
                assert (await call(client, "rl_check_status", run_id="lives-on"))["status"] == "running"
        await anyio.sleep(0.5)
        assert trainer.poll() is None
        assert store.get("lives-on").status == "running"  # type: ignore[union-attr]
        async with serving(env, stop_runs_on_exit=False) as (app, _):  # a restarted server re-adopts it
            assert app.runs.get("lives-on").status == "running"
            assert set(app.runs.children("lives-on")) == {"trainer"}
    finally:
        trainer.kill()
        trainer.wait()
