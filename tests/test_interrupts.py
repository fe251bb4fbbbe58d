"""Nothing left behind: a command or bench stopped by SIGINT or SIGTERM stops what it started before
it exits, and what its killed children left in their TMPDIR (W&B's temporary folders) goes too.
Real processes and real signals: a bench with a real run, a command's supervised child, and a stdio
server with a tool call's children under way."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import anyio.to_thread
import psutil
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]
SIGNALS = pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])

# A command whose one child ignores SIGTERM (so its stop ends in SIGKILL) after making the folders
# `import wandb` makes; the command prints the child's TMPDIR and waits to be stopped.
COMMAND = """
import sys
import anyio
from pathlib import Path
from rl_mcp import interrupts
from rl_mcp.processes import supervised

CHILD = (
    "import os, signal, tempfile, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
    "tempfile.mkdtemp('wandb-media'); tempfile.mkdtemp('wandb-artifacts'); print(os.environ['TMPDIR'], flush=True); "
    "time.sleep(600)"
)

async def main(log: Path) -> None:
    async with supervised("child", [sys.executable, "-c", CHILD], log_path=log, env={"PATH": ""}, stop_grace_s=1.0):
        while not log.read_text().strip():
            await anyio.sleep(0.05)
        print(log.read_text().strip(), flush=True)
        await anyio.sleep(600)

interrupts.run(main, Path(sys.argv[1]))
"""


def started_by(tmp: Path, since: float) -> list[psutil.Process]:
    """Live processes started since `since` whose TMPDIR is `tmp` or a folder in it: whatever the
    command started, however deep, and whatever those started in turn."""
    found = []
    for proc in psutil.process_iter(["create_time", "status"]):
        try:
            if proc.info["create_time"] < since or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("TMPDIR", "").startswith(str(tmp)):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for(check: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout:.0f} s")
        time.sleep(0.2)


@contextmanager
def nothing_left(seen: list[psutil.Process], tmp: Path, since: float) -> Iterator[None]:
    """After the block, none of `seen` and nothing the command started is alive, and `tmp` (its
    TMPDIR) is empty. Whatever is left is killed anyway."""
    try:
        yield
        left = [p for p in {*seen, *started_by(tmp, since)} if alive(p)]
        assert left == [], [" ".join(p.cmdline()) for p in left]
        assert sorted(p.name for p in tmp.iterdir()) == []
    finally:
        for p in seen:
            try:
                p.kill()
            except psutil.Error:
                pass


def interrupt_and_check(proc: subprocess.Popen[bytes], sig: signal.Signals, tmp: Path, since: float) -> None:
    """Send `sig`; the command must exit 128 + sig with nothing of it left."""
    seen = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True), *started_by(tmp, since)]
    with nothing_left(seen, tmp, since):
        proc.send_signal(sig)
        assert proc.wait(timeout=120) == 128 + sig


@SIGNALS
def test_an_interrupted_command_stops_its_children_and_removes_their_tmpdir(
    tmp_path: Path, sig: signal.Signals
) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    since = time.time() - 1
    proc = subprocess.Popen(
        [sys.executable, "-c", COMMAND, str(tmp_path / "child.log")],
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    child_tmp = Path(proc.stdout.readline().decode().strip())
    assert child_tmp.parent == tmp and len(list(child_tmp.glob("tmp*wandb-*"))) == 2
    interrupt_and_check(proc, sig, tmp, since)


@pytest.mark.slow
def test_an_interrupted_bench_stops_its_run(tmp_path: Path) -> None:
    """bench/byo_envs.py on the local profile: Ctrl-C once its run's environment has imported W&B,
    it exits 130, with no process of the run left and the run's TMPDIR removed. SIGINT alone: every
    exit signal takes the same path (`rl_mcp.interrupts.run`), checked for each by the test above."""
    sig = signal.SIGINT
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    since = time.time() - 1
    with open(tmp_path / "bench.log", "wb") as log:
        argv = ["bench/byo_envs.py", "--profile", "local", "--env", "letter_repeat", "--steps", "1000"]
        bench = subprocess.Popen(
            [sys.executable, *argv], cwd=ROOT, env={**os.environ, "TMPDIR": str(tmp)}, stdout=log, stderr=log
        )

    def environment_imported_wandb() -> bool:  # the run's three processes start together, its imports last
        assert bench.poll() is None, (tmp_path / "bench.log").read_text()[-3000:]
        return bool(list(tmp.glob("rl-mcp-run-*/tmp*wandb-media")))

    try:
        wait_for(environment_imported_wandb, 300, "environment process with W&B imported")
    except BaseException:
        bench.kill()
        raise
    interrupt_and_check(bench, sig, tmp, since)


async def _call_until_the_server_goes(client: Client, tool: str, args: dict[str, object]) -> None:
    try:
        await client.call_tool(tool, args)
    except Exception:  # the connection closes under the call
        pass


@pytest.mark.slow
@pytest.mark.anyio
async def test_sigterm_to_a_stdio_server_stops_the_children_of_its_tool_calls(tmp_path: Path) -> None:
    """rl_test_inference under way (a local inference server, an environment process): the stdio
    server, sent SIGTERM, exits without waiting for the call (os._exit) yet stops both first."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    since = time.time() - 1
    env = {**os.environ, "RL_MCP_PROFILE": "local", "TMPDIR": str(tmp)}
    params = StdioServerParameters(command=sys.executable, args=["-m", "rl_mcp", "serve"], env=env, cwd=str(ROOT))
    async with Client(params, read_timeout_seconds=600) as client:
        await client.call_tool("rl_select_environment", {"name": "letter_repeat"})
        (server,) = [p for p in started_by(tmp, since) if p.cmdline()[1:4] == ["-m", "rl_mcp", "serve"]]
        async with anyio.create_task_group() as tg:
            tg.start_soon(_call_until_the_server_goes, client, "rl_test_inference", {"num_steps": 50})

            def children() -> list[psutil.Process]:
                return [p for p in started_by(tmp, since) if p != server]

            def both_started() -> bool:
                cmdlines = [" ".join(p.cmdline()) for p in children()]
                return any("inference_server" in c for c in cmdlines) and any("env_process" in c for c in cmdlines)

            await anyio.to_thread.run_sync(wait_for, both_started, 300, "inference server and environment process")
            with nothing_left(children(), tmp, since):
                server.send_signal(signal.SIGTERM)
                await anyio.to_thread.run_sync(wait_for, lambda: not alive(server), 60, "exit of the server")
