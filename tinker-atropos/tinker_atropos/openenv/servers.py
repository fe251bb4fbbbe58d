"""The OpenEnv servers of one environment process: started on loopback from a folder, ready when
`/health` answers, stopped with the process (and killed with it: `setpriv --pdeathsig KILL`).

One server holds as many sessions as the rollouts need where the environment declares
SUPPORTS_CONCURRENT_SESSIONS; one that does not gets a server per session. A server named by URL
is the user's own: it is probed, never started or stopped. Each rollout takes a session slot.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from tinker_atropos.http_tls import shared_tls
from tinker_atropos.openenv.folder import OpenEnvFolder
from tinker_atropos.openenv.wire import OpenEnvError

SERVE_FILE = Path(__file__).with_name("serve.py")
HEALTH_POLL_S = 0.1
STOP_WAIT_S = 5.0
TAIL_CHARS = 3000


class ServerFailed(OpenEnvError):
    """A server did not start, or died: names it, with its own output's last lines."""


@dataclass
class Server:
    url: str
    name: str
    process: asyncio.subprocess.Process | None = None  # None: the user's own, given by URL
    log: Path | None = None
    sessions: int = 1

    def tail(self) -> str:
        if self.log is None:
            return ""
        try:
            return self.log.read_text(errors="replace")[-TAIL_CHARS:].strip()
        except OSError:
            return ""

    def died(self) -> str | None:
        """Why this server is gone (its exit code and output), or None while it runs."""
        if self.process is None or self.process.returncode is None:
            return None
        tail = self.tail()
        return f"the OpenEnv server of {self.name} exited with code {self.process.returncode}" + (
            f"; its output ends:\n{tail}" if tail else " and printed nothing"
        )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _wait_healthy(server: Server, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(timeout=2.0, trust_env=False, verify=shared_tls()) as client:
        while True:
            gone = server.died()
            if gone is not None:
                raise ServerFailed(gone)
            try:
                if (await client.get(f"{server.url}/health")).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() >= deadline:
                tail = server.tail()
                raise ServerFailed(
                    f"the OpenEnv server of {server.name} at {server.url} did not answer /health within {timeout_s:g} s"
                    + (f"; its output ends:\n{tail}" if tail else "")
                )
            await asyncio.sleep(HEALTH_POLL_S)


async def _start_one(python: str, folder: OpenEnvFolder, sessions: int, log_dir: Path, timeout_s: float) -> Server:
    port = _free_port()
    log = log_dir / f"openenv-{folder.name}-{port}.log"
    report = log.with_suffix(".json")
    argv = [python, str(SERVE_FILE), "--folder", str(folder.path), "--app", folder.app]
    argv += ["--port", str(port), "--sessions", str(sessions), "--report", str(report)]
    setpriv = shutil.which("setpriv")
    argv = [setpriv, "--pdeathsig", "KILL", "--", *argv] if setpriv else argv
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out, cwd=folder.path, start_new_session=True
        )
    server = Server(f"http://127.0.0.1:{port}", folder.name, process, log)
    try:
        await _wait_healthy(server, timeout_s)
        server.sessions = int(json.loads(report.read_text()).get("sessions") or 1)
    except BaseException:
        await stop(server)
        raise
    return server


async def start_servers(
    python: str, folder: OpenEnvFolder, sessions: int, log_dir: Path, timeout_s: float
) -> list[Server]:
    """Servers of `folder` with `sessions` sessions in all (one server unless the environment
    cannot share one between sessions)."""
    first = await _start_one(python, folder, sessions, log_dir, timeout_s)
    more = max(0, sessions - first.sessions)
    # every start ends before anything is decided: one that fails leaves none of the others running
    started = await asyncio.gather(
        *(_start_one(python, folder, 1, log_dir, timeout_s) for _ in range(more)), return_exceptions=True
    )
    servers = [first, *(s for s in started if isinstance(s, Server))]
    failed = [s for s in started if isinstance(s, BaseException)]
    if failed:
        await stop_all(servers)
        raise failed[0]
    return servers


async def given_server(url: str, name: str, sessions: int, timeout_s: float) -> Server:
    """The user's own running server, once its `/health` answers."""
    server = Server(url.rstrip("/"), name, sessions=sessions)
    await _wait_healthy(server, timeout_s)
    return server


async def stop(server: Server) -> None:
    process = server.process
    if process is None or process.returncode is not None:
        return
    _signal_group(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), STOP_WAIT_S)
    except TimeoutError:
        _signal_group(process.pid, signal.SIGKILL)
        await process.wait()


def _signal_group(pid: int, sig: signal.Signals) -> None:
    """The server's whole process group (it leads its own session): whatever it started goes too."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


async def stop_all(servers: list[Server]) -> None:
    await asyncio.gather(*(stop(s) for s in servers))


@dataclass
class Slots:
    """Session slots over the servers: a rollout waits for one and gives it back."""

    servers: list[Server]
    _free: asyncio.Queue[Server] = field(default_factory=asyncio.Queue)

    def __post_init__(self) -> None:
        for server in self.servers:
            for _ in range(server.sessions):
                self._free.put_nowait(server)

    async def take(self) -> Server:
        return await self._free.get()

    def give_back(self, server: Server) -> None:
        self._free.put_nowait(server)
