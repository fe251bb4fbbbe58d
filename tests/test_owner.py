"""A child ends with its owner (tinker_atropos/owner.py): real processes, a real SIGKILL. The
supervised stage relies on it, forked from a warm template whose parent is not the server."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tinker_atropos.owner import ORPHAN_GRACE_VAR, OWNER_VAR, owner_alive, owner_token, process_start_ticks

CHILD = """
import signal, sys, time
from pathlib import Path
from tinker_atropos.owner import end_with_owner
out = Path(sys.argv[1])
signal.signal(signal.SIGTERM, lambda *_: (out.write_text("saved on SIGTERM"), sys.exit(0)))
out.write_text("watching" if end_with_owner() else "no owner")
time.sleep(60)
"""


def wait_for(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return False


def test_a_child_gets_sigterm_once_its_owner_is_killed_outright(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    out = tmp_path / "child.txt"
    env = {**os.environ, OWNER_VAR: owner_token(owner.pid)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(out)], env=env)  # not the owner's child
    try:
        assert wait_for(lambda: out.exists() and out.read_text() == "watching"), out.read_text()
        time.sleep(0.6)  # past a poll: the owner alive, the child goes on
        assert child.poll() is None
        owner.kill()  # no handler of the owner's runs; unreaped, it is a zombie: gone all the same
        assert wait_for(lambda: child.poll() is not None, 5.0)
        assert child.returncode == 0 and out.read_text() == "saved on SIGTERM"
    finally:
        for proc in (owner, child):
            proc.kill()
            proc.wait()


def test_a_child_stuck_past_its_grace_is_killed(tmp_path: Path) -> None:
    """Its SIGTERM handler cannot end it (a call to an engine the machine killed never returns): the
    watch sends SIGKILL once the grace is over, so no orphan outlives its owner for good."""
    owner = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    out = tmp_path / "child.txt"
    env = {**os.environ, OWNER_VAR: owner_token(owner.pid), ORPHAN_GRACE_VAR: "1"}
    stuck = CHILD.replace('out.write_text("saved on SIGTERM"), sys.exit(0)', 'out.write_text("stuck")')
    child = subprocess.Popen([sys.executable, "-c", stuck, str(out)], env=env)
    try:
        assert wait_for(lambda: out.exists() and out.read_text() == "watching"), out.read_text()
        owner.kill()
        assert wait_for(lambda: out.read_text() == "stuck", 5.0)
        assert wait_for(lambda: child.poll() is not None, 5.0)
        assert child.returncode == -signal.SIGKILL
    finally:
        for proc in (owner, child):
            proc.kill()
            proc.wait()


def test_no_owner_named_means_no_watch_and_a_reused_pid_is_not_the_owner(tmp_path: Path) -> None:
    out = tmp_path / "child.txt"
    env = {k: v for k, v in os.environ.items() if k != OWNER_VAR}
    child = subprocess.run([sys.executable, "-c", CHILD.replace("60", "0"), str(out)], env=env, timeout=30)
    assert child.returncode == 0 and out.read_text() == "no owner"
    me, ticks = os.getpid(), process_start_ticks(os.getpid())
    assert ticks is not None and owner_alive(me, ticks) and not owner_alive(me, ticks + 1)
    assert owner_token() == f"{me}-{ticks}"
