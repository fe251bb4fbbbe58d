"""Children forked from a process that has already imported what they need (stdlib only).

A warm process (rl_mcp's template, a verifiers-v1 child's) calls `serve`: it listens on a unix
socket, and `request` sends it the argv after the interpreter (`-m module ...` or `script ...`), the
environment, the folder, and the child's stdin/stdout/stderr as file descriptors. The forked child
becomes what `python ARGV` would have been: its own session, descriptors, folder, environment,
TMPDIR, signals, `sys.argv`/`sys.path`, and its command line and environment as /proc shows them
(as far as the warm process's own start left room); its exit code goes back on the request's
connection. The server is single-threaded, so a fork copies no lock held by another thread.

`read_at_import` says which variables a child must share with the warm process: what the libraries
it imported read once, at import. Every other variable is the child's own, set after the fork.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import io
import json
import os
import runpy
import select
import shutil
import signal
import socket
import struct
import sys
import tempfile
import threading
import time
import traceback
import weakref
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

HEADER = struct.Struct("!I")
_PR_SET_NAME = 15
DISABLE_VAR = "RL_MCP_WARM_START"  # "0": every child starts cold

# Read at import by the libraries a warm process imports (or by the interpreter at its start).
IMPORT_TIME_PREFIXES = (
    "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "SAFETENSORS_", "PEFT_", "ACCELERATE_", "DIFFUSERS_",
    "TORCH", "PYTORCH_", "ATEN_", "CUDA", "NVIDIA_", "TRITON_", "XLA_",
    "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "DNNL_", "ONEDNN_", "NUMEXPR_", "NUMBA_",
    "PYTHON", "LD_", "XDG_", "LC_",
)  # fmt: skip
IMPORT_TIME_NAMES = frozenset({"HOME", "PATH", "LANG", "LANGUAGE", "USER", "TZ"})
# read at import, but set again in the child after the fork (its streams, huggingface_hub's offline flag)
SET_BY_THE_CHILD = frozenset({"PYTHONUNBUFFERED", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"})
# under those prefixes, but read where they are used, never at import: the child's own. Libraries set
# them in a running process (tokenizers after a fork, torch's inductor at its first compile), where a
# server that imports them (a test's) would otherwise start a template for each change.
READ_WHEN_USED = frozenset({"TOKENIZERS_PARALLELISM", "TORCHINDUCTOR_CACHE_DIR"})


def read_at_import(name: str) -> bool:
    if name in SET_BY_THE_CHILD or name in READ_WHEN_USED:
        return False
    return name in IMPORT_TIME_NAMES or name.startswith(IMPORT_TIME_PREFIXES)


def import_time_environment(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """What of `env` a child must share with the warm process it is forked from."""
    return tuple(sorted((k, v) for k, v in env.items() if read_at_import(k)))


def forkable(argv: Sequence[str]) -> bool:
    """Whether `python ARGV` is a module or a script a warm process can run (no interpreter flags)."""
    if argv and argv[0] == "-m":
        return len(argv) > 1
    return bool(argv) and not argv[0].startswith("-") and argv[0].endswith(".py")


def import_key(
    argv: Sequence[str], env: Mapping[str, str], python: str, platform: str = sys.platform
) -> tuple[tuple[str, str], ...] | None:
    """The import-time environment a warm process of `python` must have to fork `argv` under `env`,
    or None when it must start cold: another interpreter, interpreter flags, warm starts turned off,
    or not Linux (a child retitles itself through /proc and prctl; macOS's frameworks refuse a fork)."""
    if platform != "linux" or env.get(DISABLE_VAR) == "0" or not argv or argv[0] != python:
        return None
    return import_time_environment(env) if forkable(argv[1:]) else None


# --- the requester's side ----------------------------------------------------------------------------


def request(
    sock_path: str, python: str, argv: Sequence[str], env: Mapping[str, str], cwd: str, fds: Sequence[int]
) -> tuple[int, socket.socket, bytes]:
    """Ask the warm process at `sock_path` to fork `python ARGV` with stdin/stdout/stderr `fds`: the
    child's pid, the connection its exit line will arrive on, and what was read past the pid line."""
    body = json.dumps({"python": python, "argv": list(argv), "env": dict(env), "cwd": cwd}).encode()
    payload = HEADER.pack(len(body)) + body
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.settimeout(5.0)
        conn.connect(sock_path)
        sent = socket.send_fds(conn, [payload[: 1 << 15]], list(fds))
        conn.sendall(payload[sent:])
        data = b""
        while b"\n" not in data:
            chunk = conn.recv(4096)
            if not chunk:
                raise ValueError("the warm process closed the connection before forking")
            data += chunk
        line, rest = data.split(b"\n", 1)
        pid = int(json.loads(line)["pid"])
    except BaseException:
        conn.close()
        raise
    conn.settimeout(None)
    return pid, conn, rest


def exit_code(line: bytes) -> int:
    """The child's exit code from its exit line (negative: the signal that ended it)."""
    return int(json.loads(line.split(b"\n")[0])["exit"])


# --- the warm process's side -------------------------------------------------------------------------


def serve(sock_path: str, owner: int, idle_s: float) -> None:
    """Fork a child for each request on `sock_path` until `owner` is gone, or `idle_s` passed with
    no request and no live child; the socket's folder is removed on the way out."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(16)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select; children are reaped below
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a stop still removes the folder (finally)
    children: dict[int, socket.socket] = {}
    last_request = time.monotonic()
    try:
        while os.getppid() == owner and (children or time.monotonic() - last_request < idle_s):
            ready, _, _ = select.select([listener.fileno(), wake_r], [], [], 1.0)
            if wake_r in ready:
                os.read(wake_r, 4096)
            _reap(children)
            if listener.fileno() in ready:
                conn, _ = listener.accept()
                last_request = time.monotonic()
                _serve(conn, children, keep_closed=(listener, wake_r, wake_w))
    finally:
        shutil.rmtree(os.path.dirname(sock_path), ignore_errors=True)  # its socket and log


def _serve(conn: socket.socket, children: dict[int, socket.socket], keep_closed: tuple[Any, ...]) -> None:
    """Fork one child for the request on `conn`; the connection then waits for its exit code."""
    try:
        conn.settimeout(10)
        body, fds = _receive(conn)
    except (OSError, ValueError):
        conn.close()
        return
    pid = os.fork()
    if pid == 0:
        _become(body, fds, [conn, *children.values(), *keep_closed])
    for fd in fds:
        os.close(fd)
    try:
        conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:
        pass  # the requester is gone; the child runs on and is reaped
    children[pid] = conn


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data, fds, _, _ = socket.recv_fds(conn, 1 << 16, 3)
    if len(fds) != 3 or len(data) < HEADER.size:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request is a length, a JSON body and three descriptors")
    (size,) = HEADER.unpack_from(data)
    body = data[HEADER.size :]
    while len(body) < size:
        chunk = conn.recv(1 << 16)
        if not chunk:
            raise ValueError("the request ended early")
        body += chunk
    return json.loads(body), fds


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps({"exit": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            conn.close()


def _become(body: dict[str, Any], fds: list[int], to_close: list[Any]) -> NoReturn:
    """In the forked child: turn into `python ARGV` as the request describes it, run it, exit."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        for item in to_close:
            if isinstance(item, int):
                os.close(item)
            else:
                item.close()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _reset_signals()
        argv: list[str] = body["argv"]
        env: dict[str, str] = body["env"]
        os.chdir(body["cwd"])
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # read TMPDIR again
        _own_temporary_folders()
        _offline_as_the_child_says(env)
        _reseed()
        _reopen_stdio(unbuffered=bool(env.get("PYTHONUNBUFFERED")))
        with contextlib.suppress(OSError, AttributeError, IndexError):  # cosmetic: ps and psutil show the template
            _retitle(body["python"], argv, env)
        code = _run(argv, body["cwd"])
    except BaseException:  # the child's own failure, reported as Python would
        traceback.print_exc()
    _exit(code)


def _run(argv: list[str], cwd: str) -> int:
    """`python ARGV`: `-m module args` or `script args`, as __main__; the exit code Python would give."""
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = cwd
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT


def _exit(code: int) -> NoReturn:
    """Python's own shutdown (non-daemon threads joined, atexit run, streams flushed), then exit."""
    with contextlib.suppress(BaseException):
        threading._shutdown()  # type: ignore[attr-defined]
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    if code < 0:  # died of a signal, as Python does after a KeyboardInterrupt
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code & 0xFF)


def _reset_signals() -> None:
    """The handlers a fresh Python starts with."""
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)


# Temporary folders made at import, by (module, class or None, attribute): wandb's media and artifacts
# staging folders (atroposlib imports wandb), used by every W&B upload of the process.
IMPORT_TIME_FOLDERS = (
    ("wandb.sdk.data_types._private", None, "MEDIA_TMP"),
    ("wandb.sdk.artifacts.artifact", "Artifact", "_TMP_DIR"),
)


def _own_temporary_folders() -> None:
    """Each import-time temporary folder made again in the child's TMPDIR, as a cold start makes it:
    the template's stays the template's (a child's exit would remove it under its siblings)."""
    for module_name, owner, attr in IMPORT_TIME_FOLDERS:
        module = sys.modules.get(module_name)
        folder = getattr(getattr(module, owner) if owner else module, attr, None) if module else None
        if not isinstance(folder, tempfile.TemporaryDirectory):
            continue
        with contextlib.suppress(Exception):
            folder._finalizer.detach()  # type: ignore[attr-defined]
            suffix = os.path.basename(folder.name)[len("tmp") + 8 :]  # mkdtemp's name: tmp, 8 random, suffix
            folder.name = tempfile.mkdtemp(suffix)
            cleanup = folder._cleanup  # type: ignore[attr-defined]
            warning = f"Implicitly cleaning up {folder!r}"
            folder._finalizer = weakref.finalize(folder, cleanup, folder.name, warn_message=warning)  # type: ignore[attr-defined]


def _offline_as_the_child_says(env: dict[str, str]) -> None:
    """huggingface_hub reads HF_HUB_OFFLINE once, at import; its readers (transformers, peft,
    datasets) go through `constants.HF_HUB_OFFLINE` at each use, so the child's own value holds."""
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        flag = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
        constants.HF_HUB_OFFLINE = flag.upper() in {"1", "ON", "YES", "TRUE"}  # type: ignore[attr-defined]


def _reseed() -> None:
    """`random` reseeds itself after a fork; numpy's global generator would repeat the template's."""
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def _reopen_stdio(*, unbuffered: bool) -> None:
    """Streams over the new descriptors 0-2, buffered as the child's PYTHONUNBUFFERED says."""
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="surrogateescape")
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        buffered: Any = raw if unbuffered else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(
            buffered,
            encoding="utf-8",
            errors="backslashreplace" if fd == 2 else "surrogateescape",
            line_buffering=fd == 2,
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _retitle(python: str, argv: list[str], env: dict[str, str]) -> None:
    """/proc/<pid>/cmdline, environ and comm as `python ARGV` with `env` would show them (ps, psutil).

    Written over the warm process's own, which its start may have padded (`rl_mcp.warm_start.templates`): the command
    line as one string, as setproctitle(3) does (the kernel reads it up to its first NUL when the
    area's last byte is not one), the environment as NUL-ended entries. What does not fit is cut."""
    name = os.path.basename(argv[1] if argv[0] == "-m" else argv[0])
    ctypes.CDLL(None).prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    with open("/proc/self/stat", "rb") as stat:
        fields = stat.read().rsplit(b")", 1)[1].split()
    arg_start, arg_end, env_start, env_end = (int(f) for f in fields[45:49])
    title = " ".join([python, *argv]).encode("utf-8", "surrogateescape")[: arg_end - arg_start - 2] + b"\0"
    entries, room = b"", env_end - env_start
    for key, value in env.items():
        entry = f"{key}={value}".encode("utf-8", "surrogateescape") + b"\0"
        if len(entries) + len(entry) <= room:
            entries += entry
    with contextlib.suppress(OSError), open("/proc/self/mem", "r+b", buffering=0) as mem:
        mem.seek(arg_start)
        mem.write(title.ljust(arg_end - arg_start, b" "))
        mem.seek(env_start)
        mem.write(entries.ljust(room, b"\0"))
