"""The warm templates of this process: started ahead, asked for children, stopped at exit.

A template is started by `prepare`, where children are sure to follow (a selection, a run's stages,
an inference test); a child is forked from it once its socket answers, and starts cold before that
or where none was prepared (a lone export or push, a command-line tool's one child: a template
would cost more than it saves). A template that fails or goes away is dropped, and the next
`prepare` starts another. Everything here is bounded and falls back to a cold start: a warm start
is only ever faster.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import anyio

from rl_mcp.warm_start.eligibility import TemplateKey, template_key
from tinker_atropos import warm_fork
from tinker_atropos.venvs import packages_stamp

# the template's entry and the room it leaves for its children's command lines and environments
# (light constants: the server never imports the module itself)
TEMPLATE_MODULE = "rl_mcp.children.warm_template"
ARGV_PAD, ENV_PAD, PAD_VAR = 4096, 65536, "RL_MCP_WARM_PAD"

log = logging.getLogger(__name__)


@dataclass
class WarmChild:
    """A child forked by a template: its pid, and the connection its exit code arrives on."""

    pid: int
    conn: socket.socket = field(repr=False)
    _buffer: bytes = b""
    _code: int | None = None
    _lost: bool = False

    def poll(self) -> int | None:
        """The exit code once the template reported it; None while it runs (or if the template is
        gone: `lost` then says so, and the process itself tells whether it still runs)."""
        while self._code is None and not self._lost:
            if b"\n" in self._buffer:
                self._code = warm_fork.exit_code(self._buffer)
                break
            try:
                chunk = self.conn.recv(4096, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return None
            except OSError:
                chunk = b""
            if not chunk:
                self._lost = True
            self._buffer += chunk
        self.conn.close()
        return self._code

    @property
    def lost(self) -> bool:
        return self._lost


@dataclass
class _Template:
    folder: Path
    popen: subprocess.Popen[bytes]
    children: list[WarmChild] = field(default_factory=list)

    @property
    def busy(self) -> bool:
        """A child of it still runs: stopping it would lose that child's exit code."""
        self.children = [c for c in self.children if c.poll() is None and not c.lost]
        return bool(self.children)

    @property
    def socket_path(self) -> Path:
        return self.folder / "template.sock"

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(5)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


READY_WAIT_S = 30.0  # a first child waits this long for a template still importing, then starts cold
MAX_IDLE_TEMPLATES = 2  # a process needs one or two (runs' children, a differing HF_HUB_OFFLINE); each holds ~0.5 GB
_templates: dict[TemplateKey, _Template] = {}  # oldest use first
_lock = threading.Lock()  # spawn runs on the event loop and in worker threads


def fork(
    argv: Sequence[str], *, env: Mapping[str, str], cwd: Path | None, stdout: int, stderr: int
) -> WarmChild | None:
    """`argv` forked from a warm template with stdin from /dev/null, or None: start it cold."""
    key = _current(template_key(argv, env, sys.executable))
    if key is None:
        return None
    with _lock:
        template = _templates.get(key)
        if template is not None and template.popen.poll() is not None:
            _drop(key, template)
            return None
        if template is None:
            return None  # none prepared for it
        _templates[key] = _templates.pop(key)  # the most recently used now
        if not template.socket_path.exists():
            return None  # still importing
    try:
        child = _request(template, argv, env, cwd, stdout, stderr)
        template.children.append(child)
        return child
    except (OSError, ValueError, KeyError) as exc:
        log.warning("warm template %s did not fork %s (%s): starting it cold", template.folder, argv[1:3], exc)
        with _lock:
            if _templates.get(key) is template:
                _drop(key, template)
        return None


def prepare(python: str, env: Mapping[str, str]) -> None:
    """Start the template that `python`'s children under `env` will be forked from, ahead of them:
    a run spawns its trainer and environment at once, before a template started by the first would
    be ready."""
    key = _key_for_children_of(python, env)
    with _lock:
        if key is not None and key not in _templates:
            _add(key)


def _key_for_children_of(python: str, env: Mapping[str, str]) -> TemplateKey | None:
    """The key of the template that forks `python -m ...` children under `env`."""
    return _current(template_key([python, "-m", TEMPLATE_MODULE], env, sys.executable))


def _current(key: TemplateKey | None) -> TemplateKey | None:
    """`key` with what is installed now where its children import from."""
    return None if key is None else replace(key, packages=packages_stamp(key.python, key.environment()))


def _add(key: TemplateKey) -> None:
    """Start the template for `key`, stopping the least recently used idle ones past the limit."""
    for old_key, old in list(_templates.items()):
        if len(_templates) < MAX_IDLE_TEMPLATES:
            break
        if not old.busy:
            _drop(old_key, old)
    _templates[key] = _start(key)


def _start(key: TemplateKey) -> _Template:
    folder = Path(tempfile.mkdtemp(prefix="rl-mcp-warm-"))
    with open(folder / "template.log", "wb") as log_file:
        popen = subprocess.Popen(
            [key.python, "-m", TEMPLATE_MODULE, str(folder / "template.sock"), str(os.getpid()), "." * ARGV_PAD],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**key.environment(), "TMPDIR": str(folder), PAD_VAR: "." * ENV_PAD},
            cwd=folder,
            start_new_session=True,
            close_fds=True,
        )
    return _Template(folder, popen)


def _drop(key: TemplateKey, template: _Template) -> None:
    code = template.popen.poll()
    if code not in (None, 0):
        tail = (template.folder / "template.log").read_text(errors="replace")[-2000:]
        log.warning("warm template exited with code %s:\n%s", code, tail)
    template.stop()
    del _templates[key]


def _request(
    template: _Template, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None, stdout: int, stderr: int
) -> WarmChild:
    stdin = os.open(os.devnull, os.O_RDONLY)
    try:
        pid, conn, rest = warm_fork.request(
            str(template.socket_path), argv[0], argv[1:], env, str(cwd or os.getcwd()), [stdin, stdout, stderr]
        )
    finally:
        os.close(stdin)
    return WarmChild(pid, conn, rest)


def stop_templates() -> None:
    """Stop every template of this process (their children run on; nothing else is left)."""
    with _lock:
        for key, template in list(_templates.items()):
            template.stop()
            del _templates[key]


atexit.register(stop_templates)


def ready(python: str, env: Mapping[str, str]) -> bool:
    """True when a template for `python`'s children under `env` answers (its imports are done)."""
    return _state(python, env) == "ready"


def importing(python: str, env: Mapping[str, str]) -> bool:
    """True while that template is still importing: False where none is starting (another
    interpreter, warm starts off, a template that died) or once it answers."""
    return _state(python, env) == "importing"


def _state(python: str, env: Mapping[str, str]) -> str:
    key = _key_for_children_of(python, env)
    with _lock:
        template = _templates.get(key) if key is not None else None
    if template is None or template.popen.poll() is not None:
        return "none"
    return "ready" if template.socket_path.exists() else "importing"


async def wait_ready(python: str, env: Mapping[str, str], timeout_s: float) -> bool:
    """Wait up to `timeout_s` for the template that will fork `python`'s children under `env` to
    finish its imports; False at once where none is starting (another interpreter, warm starts off)."""
    with anyio.move_on_after(timeout_s):
        while importing(python, env):
            await anyio.sleep(0.05)
        return ready(python, env)
    return False
