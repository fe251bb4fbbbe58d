"""The process layer against real subprocesses and a real run-api."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio
import httpx
import psutil
import pytest

from rl_mcp.processes import StageError, adopt, same_process_alive, spawn, stop, wait_ready
from rl_mcp.runs.ports import PortReservations

pytestmark = pytest.mark.anyio

# Forks a grandchild in the same group and one in a new session, then idles; ignores SIGTERM when asked.
TREE = r"""
import os, signal, subprocess, sys, time
if "ignore" in sys.argv:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("secret seen:", os.environ.get("RL_TEST_SECRET"), flush=True)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"], start_new_session=True)
print("tree up", flush=True)
time.sleep(300)
"""


async def _wait_log(path: Path, text: str, timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while text not in (path.read_text() if path.exists() else ""):
            await anyio.sleep(0.05)


def _env() -> dict[str, str]:
    return {**os.environ, "RL_TEST_SECRET": "s3cret"}


async def test_stop_kills_the_whole_tree(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "tree.log"
    child = spawn("tree", [sys.executable, "-c", TREE], log_path=log, env=_env())
    await _wait_log(log, "tree up")
    tree = child.descendants()
    assert len(tree) == 2
    assert "s3cret" not in " ".join(psutil.Process(child.pid).cmdline())
    assert "secret seen: s3cret" in log.read_text()
    assert os.getpgid(child.pid) == child.pid != os.getpgid(0)  # its own group, not ours
    code = await stop(child, grace_s=5)
    assert code == -15
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in tree if _exists(p))


async def test_sigterm_ignored_escalates_to_sigkill(tmp_path: Path) -> None:
    log = tmp_path / "ignore.log"
    child = spawn("stubborn", [sys.executable, "-c", TREE, "ignore"], log_path=log, env=_env())
    await _wait_log(log, "tree up")
    tree = child.descendants()
    started = time.monotonic()
    code = await stop(child, grace_s=0.5)
    assert code == -9
    assert time.monotonic() - started < 5
    assert not any(_exists(p) and p.status() != psutil.STATUS_ZOMBIE for p in tree)


async def test_adopt_matches_pid_and_start_time(tmp_path: Path) -> None:
    child = spawn(
        "sleeper", [sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / "s.log", env=_env()
    )
    try:
        assert adopt("sleeper", child.pid, child.create_time + 5, child.log_path) is None  # recycled pid
        adopted = adopt("sleeper", child.pid, child.create_time, child.log_path)
        assert adopted is not None and adopted.running and adopted.popen is None
        await stop(adopted, grace_s=5)
        child.poll()  # reap our zombie: the adopted handle is not its parent
        assert not same_process_alive(child.pid, child.create_time)
        assert adopted.poll() == -1  # gone, code unknowable from outside
    finally:
        await stop(child, grace_s=1)


async def test_readiness_against_real_run_api(tmp_path: Path) -> None:
    port = PortReservations().reserve(1)[0]
    run_api = Path(sys.executable).with_name("run-api")
    child = spawn(
        "api", [str(run_api), "--host", "127.0.0.1", "--port", str(port)], log_path=tmp_path / "api.log", env=_env()
    )
    try:
        async with httpx.AsyncClient(timeout=1.0) as http:

            async def answers() -> bool:
                try:
                    return (await http.get(f"http://127.0.0.1:{port}/status")).status_code == 200
                except httpx.HTTPError:
                    return False

            took = await wait_ready("api", child, answers, timeout_s=60)
            assert took < 60
            assert (await http.get(f"http://127.0.0.1:{port}/status")).json()["current_step"] == 0
    finally:
        await stop(child, grace_s=5)
    assert not child.running


async def test_readiness_fails_fast_when_the_child_exits(tmp_path: Path) -> None:
    child = spawn(
        "dies", [sys.executable, "-c", "import sys; print('bye'); sys.exit(7)"], log_path=tmp_path / "d.log", env=_env()
    )

    async def never() -> bool:
        return False

    started = time.monotonic()
    with pytest.raises(StageError) as err:
        await wait_ready("trainer", child, never, timeout_s=60)
    assert err.value.exit_code == 7 and err.value.stage == "trainer"
    assert time.monotonic() - started < 10


async def test_readiness_times_out(tmp_path: Path) -> None:
    child = spawn(
        "slow", [sys.executable, "-c", "import time; time.sleep(60)"], log_path=tmp_path / "s.log", env=_env()
    )
    try:

        async def never() -> bool:
            return False

        with pytest.raises(StageError, match="not ready after 1 s") as err:
            await wait_ready("env", child, never, timeout_s=1, interval_s=0.05)
        assert err.value.exit_code is None
    finally:
        await stop(child, grace_s=1)


def _exists(proc: psutil.Process) -> bool:
    try:
        return proc.is_running()
    except psutil.Error:
        return False
