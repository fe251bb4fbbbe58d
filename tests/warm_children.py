"""A product child run from a test as the server runs it: forked from this worker's warm template
(rl_mcp/warm_start/, the one its in-process servers share), where torch, transformers, peft and
atroposlib are imported already. Started cold, each spent 2-4 CPU s importing them first.

`start` gives a process with the part of `subprocess.Popen`'s face the tests use (in a session of
its own, stdin from /dev/null); `run` what `subprocess.run(argv, capture_output=True, text=True)`
gives. A child no template can fork (another interpreter, interpreter flags) starts cold, as the
server's would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from rl_mcp import warm_start


@dataclass
class Forked:
    """A child forked by the template: its exit code comes from the template, not from waitpid."""

    args: list[str]
    child: warm_start.WarmChild
    returncode: int | None = None

    @property
    def pid(self) -> int:
        return self.child.pid

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.child.poll()
            assert self.returncode is not None or not self.child.lost, f"the warm template went away under {self.args}"
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            time.sleep(0.05)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)


def start(
    argv: list[str], *, env: Mapping[str, str], stdout: int, stderr: int, cwd: Path | None = None
) -> Forked | subprocess.Popen[bytes]:
    warm_start.prepare(sys.executable, env)
    deadline = time.monotonic() + warm_start.READY_WAIT_S  # as warm_start.wait_ready waits, for sync callers
    while warm_start.importing(sys.executable, env) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = warm_start.fork(argv, env=env, cwd=cwd, stdout=stdout, stderr=stderr)
    if child is not None:
        return Forked(list(argv), child)
    return subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, env=env, cwd=cwd, start_new_session=True
    )


def run(
    argv: list[str], *, env: Mapping[str, str], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = start(argv, env=env, stdout=out.fileno(), stderr=err.fileno(), cwd=cwd)
        try:
            code = proc.wait(timeout)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)  # a session of its own
                proc.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(argv, code, out.read().decode(), err.read().decode())
