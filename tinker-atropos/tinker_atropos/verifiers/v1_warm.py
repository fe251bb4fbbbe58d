"""A rollout's Python programs forked warm: verifiers' subprocess runtime, less the import time.

A verifiers-v1 rollout starts Python programs on this venv's interpreter: a tool server per toolset
(`python -m <module>`) and a harness program (`python <script>`). Each spends about 3 CPU seconds
importing verifiers, mcp and openai before its first line of work, for every rollout of every group.
`start` forks this child, once it has loaded its environment and before its event loop, into a warm
process (`tinker_atropos.warm_fork`), and `install` makes the runtime's `create_subprocess_exec` ask
it for those programs: they start with verifiers imported. Any other command, a differing
import-time environment, `RL_MCP_WARM_START=0`, or any failure starts the program cold, as before.

Runs in the verifiers-v1 venv, next to `v1_child.py` (stdlib and asyncio only).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import IO, Any

_COLD_PATH = sys.path[1:]  # the interpreter's own, as a cold start has it
sys.path.append(str(Path(__file__).resolve().parents[2]))  # tinker_atropos, for its stdlib-only warm_fork
from tinker_atropos import warm_fork  # noqa: E402

PIPE, STDOUT, DEVNULL = asyncio.subprocess.PIPE, asyncio.subprocess.STDOUT, asyncio.subprocess.DEVNULL


class WarmStarts:
    """The warm process of this child: which programs it may fork, and the forking."""

    def __init__(self, sock_path: str, import_env: tuple[tuple[str, str], ...]) -> None:
        self.sock_path = sock_path
        self.import_env = import_env
        self.forked = 0
        self.cold = 0

    def takes(self, argv: Sequence[str], env: dict[str, str]) -> bool:
        shared = warm_fork.import_key(argv, env, sys.executable)
        return shared is not None and shared == self.import_env and os.path.exists(self.sock_path)

    async def fork(
        self, argv: Sequence[str], env: dict[str, str], cwd: str | None, stdin: Any, stdout: Any, stderr: Any
    ) -> WarmProcess:
        """`argv` forked with the descriptors asyncio would give it (PIPE, DEVNULL, STDOUT, a file)."""
        ours: list[int] = []  # descriptors made here: the child's ends are closed once sent
        parents: dict[str, int] = {}

        def child_end(name: str, value: Any, writes: bool) -> int:
            if value == PIPE:
                read, write = os.pipe()
                parents[name], child = (read, write) if writes else (write, read)
                ours.append(child)
                return child
            if value is None and writes:
                return 1 if name == "stdout" else 2
            if value is None or value == DEVNULL:  # stdin: never this child's request pipe
                ours.append(os.open(os.devnull, os.O_WRONLY if writes else os.O_RDONLY))
                return ours[-1]
            return value if isinstance(value, int) else value.fileno()

        try:
            fds = [child_end("stdin", stdin, False), child_end("stdout", stdout, True)]
            fds.append(fds[1] if stderr == STDOUT else child_end("stderr", stderr, True))
            folder = str(cwd or os.getcwd())
            pid, conn, rest = await asyncio.to_thread(
                warm_fork.request, self.sock_path, argv[0], argv[1:], env, folder, fds
            )
        except BaseException:
            for fd in parents.values():
                os.close(fd)
            raise
        finally:
            for fd in ours:
                os.close(fd)
        self.forked += 1
        return await WarmProcess.attach(pid, conn, rest, parents)


class WarmProcess:
    """asyncio.subprocess.Process's face over a program the warm process forked: its streams, its
    pid (its own session, as `start_new_session` gives), and its exit code from the warm process."""

    def __init__(self, pid: int, stdin: Any, stdout: Any, stderr: Any, exited: asyncio.Task[int]) -> None:
        self.pid = pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self._exited = exited

    @classmethod
    async def attach(cls, pid: int, conn: socket.socket, rest: bytes, parents: dict[str, int]) -> WarmProcess:
        loop = asyncio.get_running_loop()
        streams: dict[str, Any] = {}
        for name, fd in parents.items():
            if name == "stdin":
                transport, protocol = await loop.connect_write_pipe(
                    asyncio.streams.FlowControlMixin, os.fdopen(fd, "wb", 0)
                )
                streams[name] = asyncio.StreamWriter(transport, protocol, None, loop)
            else:
                reader = asyncio.StreamReader(limit=2**16)
                await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), os.fdopen(fd, "rb", 0))
                streams[name] = reader
        exited = asyncio.ensure_future(_exit_code(pid, conn, rest))
        return cls(pid, streams.get("stdin"), streams.get("stdout"), streams.get("stderr"), exited)

    @property
    def returncode(self) -> int | None:
        """Read from the exit task itself: a done callback setting it could still be queued when
        `wait()` returns at once for a task already done (communicate() then read None)."""
        task = self._exited
        if not task.done():
            return None
        return task.result() if not task.cancelled() and task.exception() is None else 1

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    async def communicate(self, input: bytes | None = None) -> tuple[bytes | None, bytes | None]:
        if self.stdin is not None:
            if input:
                self.stdin.write(input)
                with contextlib.suppress(ConnectionError):
                    await self.stdin.drain()
            self.stdin.close()

        async def read(stream: asyncio.StreamReader | None) -> bytes | None:
            return None if stream is None else await stream.read()

        out, err = await asyncio.gather(read(self.stdout), read(self.stderr))
        await self.wait()
        return out, err

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


async def _exit_code(pid: int, conn: socket.socket, data: bytes) -> int:
    """The exit line the warm process sends when it reaps `pid`; were the warm process gone first,
    1 once the program is gone too."""
    loop = asyncio.get_running_loop()
    conn.setblocking(False)
    with conn:
        while b"\n" not in data:
            chunk = await loop.sock_recv(conn, 4096)
            if not chunk:
                break
            data += chunk
    if b"\n" in data:
        return warm_fork.exit_code(data)
    while Path(f"/proc/{pid}").exists():
        await asyncio.sleep(0.2)
    return 1


class _AsyncioWithWarmStarts:
    """asyncio as verifiers' subprocess runtime uses it, its programs forked warm where they can be."""

    def __init__(self, warm: WarmStarts) -> None:
        self._warm = warm

    def __getattr__(self, name: str) -> Any:
        return getattr(asyncio, name)

    async def create_subprocess_exec(self, program: str, *args: str, **kwargs: Any) -> Any:
        argv, env = [program, *args], kwargs.get("env") or dict(os.environ)
        if self._warm.takes(argv, env):
            streams = {name: kwargs.get(name) for name in ("stdin", "stdout", "stderr")}
            with contextlib.suppress(OSError, ValueError, KeyError):
                return await self._warm.fork(argv, env, kwargs.get("cwd"), **streams)
        self._warm.cold += 1
        return await asyncio.create_subprocess_exec(program, *args, **kwargs)


def start(close: Sequence[IO[Any]]) -> WarmStarts | None:
    """Fork the warm process (single-threaded, so no other thread's lock comes with it), closing
    its copies of `close` (this child's reply stream); None where programs must start cold."""
    if sys.platform != "linux" or os.environ.get(warm_fork.DISABLE_VAR) == "0" or threading.active_count() > 1:
        return None
    folder = tempfile.mkdtemp(prefix="rl-mcp-v1-warm-")
    sock_path, owner = os.path.join(folder, "warm.sock"), os.getpid()
    pythonpath = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    for stream in (sys.stdout, sys.stderr, *close):
        stream.flush()
    if os.fork() == 0:
        try:
            for stream in close:
                os.close(stream.fileno())
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # never this child's request pipe
            sys.path[:] = ["", *pythonpath, *_COLD_PATH]
            warm_fork.serve(sock_path, owner, float("inf"))
        finally:
            os._exit(0)
    return WarmStarts(sock_path, warm_fork.import_time_environment(os.environ))


def install(runtime_module: ModuleType, warm: WarmStarts) -> None:
    """`runtime_module`'s asyncio (verifiers.v1.runtimes.subprocess) starts programs through `warm`."""
    runtime_module.asyncio = _AsyncioWithWarmStarts(warm)  # type: ignore[attr-defined]
