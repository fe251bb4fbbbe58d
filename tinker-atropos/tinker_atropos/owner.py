"""A process ends with the one that owns it, told apart from a reused pid by its start time.

A child started cold under `setpriv --pdeathsig` gets its signal from the kernel when its parent
dies; one forked from a warm template has the template as its parent, so it watches its owner
itself (`end_with_owner`). Sandboxes use the same test to find the folders of owners that are gone.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

OWNER_VAR = "TINKER_ATROPOS_OWNER"  # "<pid>-<start ticks>" of the process a child ends with
POLL_S = 0.5
# after `sig`, the process has this long to end as its handler does (save, clean up): a call that
# never returns (its engine killed by the machine's out-of-memory killer) would otherwise keep an
# orphan alive for good, with no server left to send SIGKILL
ORPHAN_GRACE_S = 90.0
ORPHAN_GRACE_VAR = "TINKER_ATROPOS_ORPHAN_GRACE_S"


def process_start_ticks(pid: int) -> int | None:
    """Start time of `pid` in clock ticks since boot; None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else int(fields[19])


def owner_alive(pid: int, start_ticks: int) -> bool:
    if sys.platform.startswith("linux"):
        return process_start_ticks(pid) == start_ticks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_token(pid: int | None = None) -> str:
    """`pid` (this process by default) as OWNER_VAR spells it."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}-{process_start_ticks(pid) or 0}"


def end_with_owner(environ: Mapping[str, str] = os.environ, sig: int = signal.SIGTERM) -> bool:
    """Send this process `sig` once the owner OWNER_VAR names is gone (checked every POLL_S): its
    handler ends the work and saves, as under `setpriv --pdeathsig`; SIGKILL ORPHAN_GRACE_S later if it
    is still there. False when no owner is named."""
    pid, _, ticks = environ.get(OWNER_VAR, "").partition("-")
    if not (pid.isdigit() and ticks.isdigit()):
        return False

    def watch() -> None:
        while owner_alive(int(pid), int(ticks)):
            threading.Event().wait(POLL_S)
        os.kill(os.getpid(), sig)
        threading.Event().wait(float(environ.get(ORPHAN_GRACE_VAR, ORPHAN_GRACE_S)))
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="owner-watch", daemon=True).start()
    return True
