"""`python -m tinker_atropos.vllm_server.guard -- ARGV`: ARGV (vLLM's server) in a process group of its
own, which goes when the guard's parent goes or the guard is told to stop.

vLLM's API server starts an engine process and a worker; killed alone it leaves both running (2.4 GB
on a CPU, measured). The guard leads their group: on SIGTERM, SIGINT or SIGHUP, on its parent's death
(its parent pid changes: robust whichever thread started it) or when the server exits, it sends the
group SIGTERM, then SIGKILL to whatever is left after a grace. Stdlib only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

GRACE_S = 10.0
POLL_S = 0.5


def group_members(pgid: int) -> list[int]:
    """The live pids of process group `pgid` (from /proc: state and group follow the command's parenthesis;
    a zombie has ended, and waits only for its parent to reap it)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and fields[0] != "Z" and int(fields[2]) == pgid:
            found.append(int(stat.parent.name))
    return found


def end_group(pgid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM to the group but this process, then SIGKILL to what is left after `grace_s`."""
    me = os.getpid()
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        others = [p for p in group_members(pgid) if p != me]
        for pid in others:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and [p for p in group_members(pgid) if p != me]:
            time.sleep(0.1)


def guarded(command: list[str]) -> list[str]:
    """The command line that runs `command` under a guard."""
    return [sys.executable, "-m", "tinker_atropos.vllm_server.guard", "--", *command]


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: python -m tinker_atropos.vllm_server.guard -- COMMAND ...", file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1 :]
    os.setpgid(0, 0)
    pgid, parent = os.getpgrp(), os.getppid()
    told = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: told.set())
    server = subprocess.Popen(command)
    try:
        while not told.wait(POLL_S):
            if server.poll() is not None or os.getppid() != parent:
                break
    finally:
        end_group(pgid)
    code = server.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
