"""The `local` sandbox backend: commands run as subprocesses of this process in a private
directory, with a scrubbed environment and rlimits. Isolation good enough for RL on one's own
tasks, not a security boundary against hostile code (docs/agentic-environments.md says what
each backend protects against; `bwrap` builds on this one)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

from tinker_atropos.agent.sandboxes import confined_fs
from tinker_atropos.agent.sandboxes.base import (
    PREFIX,
    SAFE_ENV,
    SANDBOX_DIR_RE,
    SHELL_WRAPPER,
    Sandbox,
    SandboxConfig,
    SandboxEscape,
    shell_path,
)
from tinker_atropos.agent.sandboxes.procs import (
    MARKER_ENV,
    CommandResult,
    child_preexec,
    kill_group,
    kill_marked,
    run_bounded,
)
from tinker_atropos.owner import owner_alive, process_start_ticks

logger = logging.getLogger(__name__)
# A running command's directory is measured against max_disk_bytes every DISK_POLL_S, or 20
# times the CPU time measuring took (a big tree is measured less often): a `head -c 16M` loop
# overshot a 64 MB cap by 3-13 MB, under a two-thread torch load too. CPU time, not wall time: on
# a loaded machine a measurement waits for a core, and pausing 20 times that wait let a writer run
# hundreds of MB past the cap.
DISK_POLL_S = 0.02


class LocalSandbox(Sandbox):
    def __init__(self, config: SandboxConfig, root: Path) -> None:
        super().__init__(config)
        self.root = root
        self.workdir = (root / "work").resolve()
        self.shell_home = str(self.workdir)
        self._state = root / "state"
        self._pgids: set[int] = set()
        self._preexec = child_preexec(config.limits)
        for d in (self.workdir, self._state, self.workdir / ".tmp"):
            d.mkdir(parents=True, exist_ok=True)
        self.env = {k: os.environ[k] for k in SAFE_ENV if k in os.environ}
        self.env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        self.env.setdefault("LANG", "C.UTF-8")
        self.env |= {
            "HOME": str(self.workdir),
            "TMPDIR": str(self.workdir / ".tmp"),
            "TERM": "dumb",
            MARKER_ENV: str(root),
            "RL_MCP_STATE": str(self._state),
            "RL_MCP_WORKDIR": str(self.workdir),
        }

    def _argv(self, command: str) -> list[str]:
        return ["bash", "-c", SHELL_WRAPPER, "bash", command]

    def _program_argv(self, argv: list[str], writable: tuple[Path, ...]) -> list[str]:
        return argv

    async def run_program(
        self, argv: list[str], env: dict[str, str], timeout_s: float, writable: tuple[Path, ...] = ()
    ) -> CommandResult:
        """A program of the host's (an agent harness in its own venv) run as the rollout's commands run,
        in its directory, with its limits, killed with it; `writable` folders beside the workdir are its
        own (bwrap binds them). Output merged, as a command's."""
        self.check_alive()
        return await self._bounded(self._program_argv(argv, writable), self.env | env, timeout_s)

    async def _run(self, command: str, timeout_s: float) -> CommandResult:
        return await self._bounded(self._argv(command), self.env, timeout_s)

    async def _bounded(self, argv: list[str], env: dict[str, str], timeout_s: float) -> CommandResult:
        spawned: list[int] = []

        def on_spawn(pgid: int) -> None:
            self._pgids.add(pgid)
            spawned.append(pgid)

        watch = asyncio.create_task(self._watch_disk(spawned))
        try:
            result = await run_bounded(
                argv,
                env=env,
                cwd=self.workdir,
                timeout_s=timeout_s,
                max_output_chars=self.config.max_output_chars,
                max_drain_bytes=self.config.max_drain_bytes,
                preexec=self._preexec,
                on_spawn=on_spawn,
            )
        finally:
            watch.cancel()
        if watch.done() and not watch.cancelled() and watch.result():
            cap = self.config.max_disk_bytes
            note = f"\n[The rollout directory grew past its {cap} bytes (max_disk_bytes): command killed]"
            result = dataclasses.replace(result, output=result.output + note, exit_code=None)
        return result

    async def _watch_disk(self, spawned: list[int]) -> bool:
        """Kill the command once the rollout directory outgrows max_disk_bytes; True if it did."""
        cap = self.config.max_disk_bytes
        if cap is None:
            return False
        pause = DISK_POLL_S
        while True:
            await asyncio.sleep(pause)
            used, cpu_s = await asyncio.to_thread(_timed_disk_usage, self.workdir)
            pause = max(DISK_POLL_S, 20 * cpu_s)
            if used > cap:
                for pgid in spawned:
                    kill_group(pgid)
                kill_marked(str(self.root))
                return True

    def resolve(self, path: str) -> Path:
        target = Path(os.path.realpath(shell_path(path, str(self.workdir), self._shell_cwd())))
        if target != self.workdir and self.workdir not in target.parents:
            raise SandboxEscape(f"path {path!r} resolves outside the sandbox workdir {self.workdir}")
        return target

    def _shell_cwd(self) -> str:
        """The directory the shell's last command ended in (relative paths start there)."""
        try:
            return (self._state / "cwd").read_text().strip() or str(self.workdir)
        except OSError:
            return str(self.workdir)

    async def read_bytes(self, path: str, limit: int) -> bytes:
        self.check_alive()
        target = self.resolve(path)
        return await asyncio.to_thread(confined_fs.read, self.workdir, target, limit, path)

    async def write_bytes(self, path: str, data: bytes) -> bool:
        self.check_alive()
        target = self.resolve(path)
        return await asyncio.to_thread(confined_fs.write, self.workdir, target, data, path)

    async def aclose(self) -> None:
        for pgid in self._pgids:
            kill_group(pgid)
        kill_marked(str(self.root))
        _remove_tree(self.root)


def disk_usage(path: Path) -> int:
    """Bytes the tree under `path` occupies (allocated blocks: sparse files count what they use)."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                pass
    return total


def _timed_disk_usage(path: Path) -> tuple[int, float]:
    """disk_usage and the CPU seconds this thread spent measuring it."""
    started = time.thread_time()
    used = disk_usage(path)
    return used, time.thread_time() - started


def make_sandbox_dir(config: SandboxConfig) -> Path:
    """A fresh `rl-mcp-sandbox-<pid>-<start>-<hex>` dir under config.root (stale ones swept)."""
    root = Path(config.root or tempfile.gettempdir())
    root.mkdir(parents=True, exist_ok=True)
    sweep_stale(root)
    ticks = process_start_ticks(os.getpid()) or 0
    path = root / f"{PREFIX}{os.getpid()}-{ticks}-{secrets.token_hex(4)}"
    path.mkdir(mode=0o700)
    return path


def _remove_tree(path: Path) -> None:
    """rmtree that also removes what the sandbox made read-only (chmod -w dirs)."""
    for dirpath, dirnames, _ in os.walk(path):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p):
                os.chmod(p, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def sweep_stale(root: Path) -> int:
    """Remove sandbox dirs (and their processes) whose owner process is gone; returns how many."""
    swept = 0
    for entry in root.glob(PREFIX + "*") if root.is_dir() else ():
        m = SANDBOX_DIR_RE.match(entry.name)
        if m and entry.is_dir() and not owner_alive(int(m.group(1)), int(m.group(2))):
            kill_marked(str(entry))
            _remove_tree(entry)
            swept += 1
    if swept:
        logger.info("swept %d stale sandbox dir(s) under %s", swept, root)
    return swept
