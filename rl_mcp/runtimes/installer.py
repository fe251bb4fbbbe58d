"""The installer a runtime is made with, and an install's output streamed line by line.

uv where it is installed (a dependency of the product, so always, unless RL_MCP_INSTALLER=pip): it
hardlinks from its cache and resolves in a second, and `--torch-backend auto` picks torch's CPU or CUDA
build for the machine. The machine's own pip find-links (PIP_FIND_LINKS) are passed on, so a torch
wheel a machine keeps on disk is taken from there (and then no torch index is asked).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio

Report = Callable[[str], Awaitable[None]]
HEARTBEAT_S = 10.0


@dataclass(frozen=True)
class Installer:
    """uv (its binary) or pip (the venv's own)."""

    uv: str | None

    @property
    def name(self) -> str:
        return "uv" if self.uv else "pip"

    def make_venv(self, base_python: str, venv: Path, *, offline: bool) -> list[str]:
        if self.uv:
            # seeded with pip: an environment folder's venv is layered on a runtime and installs with its pip
            seeded = [self.uv, "venv", "--quiet", "--seed", "--python", base_python, str(venv)]
            return [*seeded, *(["--offline"] if offline else [])]
        return [base_python, "-m", "venv", str(venv)]

    def install(self, venv: Path, args: Sequence[str], environ: Mapping[str, str], *, offline: bool) -> list[str]:
        python = str(venv / "bin" / "python")
        if not self.uv:
            return [python, "-m", "pip", "install", "--progress-bar", "off", *args]
        argv = [self.uv, "pip", "install", "--python", python]
        links = find_links(environ)
        for link in links:
            argv += ["--find-links", link]
        asks_torch = any(a.split("=")[0].split("[")[0].strip().lower() == "torch" for a in args)
        if asks_torch and not environ.get("UV_TORCH_BACKEND") and not any(has_torch(link) for link in links):
            argv += ["--torch-backend", "auto"]
        return [*argv, *(["--offline"] if offline else []), *args]

    def uninstall(self, venv: Path, names: Sequence[str]) -> list[str]:
        python = str(venv / "bin" / "python")
        if not self.uv:
            return [python, "-m", "pip", "uninstall", "--yes", *names]
        return [self.uv, "pip", "uninstall", "--python", python, *names]


def find_links(environ: Mapping[str, str]) -> list[str]:
    """The folders or pages pip is told to find wheels in on this machine."""
    return [link for var in ("UV_FIND_LINKS", "PIP_FIND_LINKS") for link in environ.get(var, "").split() if link]


def has_torch(link: str) -> bool:
    folder = Path(link.removeprefix("file://"))
    return folder.is_dir() and any(folder.glob("torch-*.whl"))


def choose(environ: Mapping[str, str]) -> Installer:
    """uv unless RL_MCP_INSTALLER=pip or none is found (its package's binary, else one on PATH)."""
    if environ.get("RL_MCP_INSTALLER", "").lower() == "pip":
        return Installer(None)
    try:
        from uv import find_uv_bin

        return Installer(find_uv_bin())
    except (ImportError, FileNotFoundError):
        return Installer(shutil.which("uv"))


def installer_env(environ: Mapping[str, str]) -> dict[str, str]:
    env = {k: v for k, v in environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    return {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1", "UV_NO_PROGRESS": "1"}


async def run_streamed(
    argv: list[str], environ: Mapping[str, str], report: Report, *, prefix: str, timeout_s: float
) -> tuple[int, list[str]]:
    """Run `argv` in a session of its own, each output line reported as it comes (and a line every
    HEARTBEAT_S while it says nothing: a client's tool timer restarts on each); killed with everything
    it started when cancelled or past `timeout_s`. Returns its exit code and lines."""
    lines: list[str] = []
    started = time.monotonic()
    proc = await anyio.open_process(
        argv, env=installer_env(environ), stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        with anyio.fail_after(timeout_s):
            async with anyio.create_task_group() as tg:

                async def heartbeat() -> None:
                    while True:
                        await anyio.sleep(HEARTBEAT_S)
                        await report(f"{prefix}still working ({time.monotonic() - started:.0f} s)")

                tg.start_soon(heartbeat)
                assert proc.stdout is not None
                buffer = b""
                async for chunk in proc.stdout:
                    buffer += chunk
                    *done, buffer = buffer.split(b"\n")
                    for raw in done:
                        line = raw.decode(errors="replace").strip()
                        if line and not line.startswith("WARNING: Location"):
                            lines.append(line)
                            await report(f"{prefix}{line}")
                code = await proc.wait()
                tg.cancel_scope.cancel()
    except BaseException:
        with anyio.CancelScope(shield=True):
            kill_session(proc.pid)
            await proc.wait()
        raise
    return code, lines


def kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
