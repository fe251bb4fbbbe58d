"""Temporary folders that a parent owns for its children: made before they start, removed once
they are stopped.

Python's tempfile and W&B put their temporary folders in TMPDIR: atroposlib imports wandb in
every environment process (`tmp*wandb-media`, `tmp*wandb-artifacts`), and a trainer or
environment with W&B on starts wandb-core (`wandb-<pid>-*` socket folders). A child that exits
by itself removes them; one that is killed (SIGTERM's default, SIGKILL after a stop's grace)
leaves them in /tmp for good. So each child gets a TMPDIR of its own that its parent removes: a
supervised child's lives as long as the child; a run's as long as the run, linked from the run
folder (`RunFiles.tmp_link`) so that whichever process settles the run (this server, the exit
stop, a later server) finds it. The folders are made in the system's temporary folder, not in the
run folder: wandb-core's socket paths must fit in 108 bytes.

A call's own folder (an inference test's, an SFT preview's, an export's staging) goes when the call
is cancelled (`removed_if_cancelled`): no answer will ever name it, and what it holds is half done.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio

from tinker_atropos.run_files import RunFiles

CHILD_PREFIX = "rl-mcp-child-"
RUN_PREFIX = "rl-mcp-run-"
log = logging.getLogger(__name__)


@contextmanager
def child_tmpdir(env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """`env` with a TMPDIR of its own, removed (whatever the child left in it) when the block ends."""
    path = Path(tempfile.mkdtemp(prefix=CHILD_PREFIX))
    try:
        yield {**env, "TMPDIR": str(path)}
    finally:
        remove_tree(path)


def run_tmpdir(files: RunFiles) -> Path:
    """The TMPDIR of a run's processes: made on first use and linked from the run folder."""
    link = files.tmp_link
    if link.is_symlink():
        target = Path(os.readlink(link))
        if target.is_dir():
            return target
        link.unlink()
    target = Path(tempfile.mkdtemp(prefix=RUN_PREFIX))
    link.symlink_to(target, target_is_directory=True)
    return target


def remove_run_tmpdir(files: RunFiles) -> None:
    """Remove the run's TMPDIR and its link, once the run's processes are stopped."""
    link = files.tmp_link
    if not link.is_symlink():
        return
    target = Path(os.readlink(link))
    if target.name.startswith(RUN_PREFIX):  # only ever what run_tmpdir made
        remove_tree(target)
    link.unlink(missing_ok=True)


@contextmanager
def removed_if_cancelled(path: Path) -> Iterator[Path]:
    """`path` removed when the block is cancelled (a client cancelled the call, the server is
    closing); kept when it ends otherwise. Its children are stopped by then: their blocks end first."""
    try:
        yield path
    except anyio.get_cancelled_exc_class():
        remove_tree(path)
        log.info("cancelled: removed %s", path)
        raise


def remove_tree(path: Path) -> None:
    """rmtree, also through folders a child made read-only or unreadable; what still resists stays."""
    shutil.rmtree(path, onerror=_open_up_and_retry)


def _open_up_and_retry(func: Callable[..., Any], name: str, _exc: object) -> None:
    try:
        if func in (os.unlink, os.rmdir):  # its folder is read-only
            os.chmod(os.path.dirname(name), 0o700)
            func(name)
        elif not os.path.islink(name):  # it could not be listed
            os.chmod(name, 0o700)
            shutil.rmtree(name, ignore_errors=True)
    except OSError:
        pass
