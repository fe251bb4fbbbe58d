"""A product child run from a test as the server runs it: forked from this worker's warm template
(rl_mcp/warm_start/, the one its in-process servers share), where torch, transformers, peft and
atroposlib are imported already. Started cold, each spent 2-4 CPU s importing them first.

`run` gives what `subprocess.run(argv, capture_output=True, text=True)` gives; a child no template
can fork (another interpreter, interpreter flags) starts cold, as the server's would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from rl_mcp import warm_start


def run(
    argv: list[str], *, env: Mapping[str, str], timeout: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    warm_start.prepare(sys.executable, env)
    deadline = time.monotonic() + warm_start.READY_WAIT_S
    while not warm_start.ready(sys.executable, env) and time.monotonic() < deadline:
        time.sleep(0.05)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = warm_start.fork(argv, env=env, cwd=cwd, stdout=out.fileno(), stderr=err.fileno())
        if child is None:
            return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
        deadline = time.monotonic() + timeout
        while (code := child.poll()) is None and not child.lost:
            if time.monotonic() > deadline:
                os.killpg(child.pid, signal.SIGKILL)  # a session of its own, as a spawned child's
                raise subprocess.TimeoutExpired(argv, timeout)
            time.sleep(0.05)
        assert code is not None, f"the warm template went away under {argv}"
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(argv, code, out.read().decode(), err.read().decode())
