"""The `docker` sandbox backend: one container per rollout, no network, removed at exit.

Commands run through `docker exec` under `timeout -s KILL` (killing the local client alone would
leave the command running in the container); files move through `docker exec` (head/cat).
Containers carry their owner's pid so a later `open_sandbox` removes those of dead owners.
"""

from __future__ import annotations

import logging
import os
import posixpath
import secrets
import shlex
import shutil
from pathlib import PurePosixPath

from tinker_atropos.agent.sandboxes.base import (
    PREFIX,
    SHELL_WRAPPER,
    Sandbox,
    SandboxConfig,
    SandboxUnavailable,
    read_inside,
    shell_path,
    write_inside,
)
from tinker_atropos.agent.sandboxes.procs import (
    MARKER_ENV,
    CommandResult,
    Limits,
    child_preexec,
    exec_bytes,
    run_bounded,
)
from tinker_atropos.owner import owner_alive, process_start_ticks

logger = logging.getLogger(__name__)

WORKDIR = PurePosixPath("/workspace")
_STATE = "/tmp/.rl-mcp-state"
_OWNER_LABEL = "rl-mcp.owner"
_PROBE_TIMEOUT_S = 5.0
_CONTROL_TIMEOUT_S = 120.0  # docker run may pull the image


async def probe_docker() -> None:
    """Raise SandboxUnavailable unless the docker CLI is installed and its daemon answers."""
    fix = "start the daemon (`sudo systemctl start docker` or `dockerd &`) or set terminal_backend=local"
    if shutil.which("docker") is None:
        raise SandboxUnavailable(f"terminal_backend 'docker' needs the docker CLI on PATH: install it, or {fix}")
    code, out = await exec_bytes(["docker", "info", "--format", "{{.ServerVersion}}"], None, _PROBE_TIMEOUT_S)
    if code != 0:
        detail = out.decode("utf-8", "replace").strip().splitlines()
        raise SandboxUnavailable(
            f"terminal_backend 'docker': the docker daemon is not reachable "
            f"({detail[-1] if detail else f'docker info exited {code}'}); {fix}"
        )


async def _sweep_containers() -> None:
    code, out = await exec_bytes(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label={_OWNER_LABEL}",
            "--format",
            '{{.ID}} {{.Label "' + _OWNER_LABEL + '"}}',
        ],
        None,
        _PROBE_TIMEOUT_S,
    )
    stale = []
    for line in out.decode().splitlines() if code == 0 else ():
        cid, _, owner = line.partition(" ")
        pid, _, ticks = owner.partition("-")
        if pid.isdigit() and ticks.isdigit() and not owner_alive(int(pid), int(ticks)):
            stale.append(cid)
    if stale:
        logger.info("removing %d stale sandbox container(s)", len(stale))
        await exec_bytes(["docker", "rm", "-f", *stale], None, _CONTROL_TIMEOUT_S)


class DockerSandbox(Sandbox):
    def __init__(self, config: SandboxConfig, container: str) -> None:
        super().__init__(config)
        self.container = container
        self.workdir = WORKDIR
        self.shell_home = str(WORKDIR)
        self._preexec = child_preexec(Limits(None, None, None, None))  # the client only needs to die with us

    async def _run(self, command: str, timeout_s: float) -> CommandResult:
        argv = ["docker", "exec", "-w", str(WORKDIR), self.container]
        argv += [
            "timeout",
            "-s",
            "KILL",
            f"{timeout_s:g}",
            "bash",
            "-c",
            SHELL_WRAPPER,
            "bash",
            command,
        ]
        return await run_bounded(
            argv,
            env=dict(os.environ),
            cwd=None,
            timeout_s=timeout_s + 5.0,  # the in-container timeout fires first
            max_output_chars=self.config.max_output_chars,
            max_drain_bytes=self.config.max_drain_bytes,
            preexec=self._preexec,
            on_spawn=lambda pid: None,
        )

    def resolve(self, path: str) -> PurePosixPath:
        """Inside the container there is nothing to escape to: only name it as its shell does
        (`~` is /workspace there too) and normalise it."""
        return PurePosixPath(posixpath.normpath(shell_path(path, str(WORKDIR), str(WORKDIR))))

    async def _exec(self, script: str, *args: str, stdin: bytes | None = None) -> tuple[int, bytes]:
        self.check_alive()
        argv = [
            "docker",
            "exec",
            *(["-i"] if stdin is not None else []),
            self.container,
        ]
        return await exec_bytes([*argv, "sh", "-c", script, "sh", *args], stdin, self.config.timeout_s)

    async def read_bytes(self, path: str, limit: int) -> bytes:
        return await read_inside(self._exec, str(self.resolve(path)), limit, path)

    async def write_bytes(self, path: str, data: bytes) -> bool:
        return await write_inside(self._exec, str(self.resolve(path)), data, path)

    async def aclose(self) -> None:
        await exec_bytes(["docker", "rm", "-f", self.container], None, _CONTROL_TIMEOUT_S)


async def open_docker(config: SandboxConfig) -> DockerSandbox:
    """Start this rollout's container (`sleep infinity`, no network, resource-limited)."""
    await probe_docker()
    await _sweep_containers()
    owner = f"{os.getpid()}-{process_start_ticks(os.getpid()) or 0}"
    name = f"{PREFIX}{owner}-{secrets.token_hex(4)}"
    argv = ["docker", "run", "-d", "--rm", "--network", "none", "--name", name]
    argv += [
        "--label",
        f"{_OWNER_LABEL}={owner}",
        "-w",
        str(WORKDIR),
        "-e",
        f"{MARKER_ENV}={name}",
    ]
    argv += ["-e", f"RL_MCP_STATE={_STATE}", "-e", f"RL_MCP_WORKDIR={WORKDIR}", "-e", f"HOME={WORKDIR}"]
    if config.memory_bytes is not None:
        argv += ["--memory", str(config.memory_bytes)]
    if config.max_processes is not None:
        argv += ["--pids-limit", str(config.max_processes)]
    if config.cpu_time_s is not None:
        argv += ["--ulimit", f"cpu={config.cpu_time_s}"]
    if config.file_size_bytes is not None:
        argv += ["--ulimit", f"fsize={config.file_size_bytes}"]
    argv += [
        config.docker_image,
        "sh",
        "-c",
        f"mkdir -p {shlex.quote(_STATE)} {WORKDIR} && exec sleep infinity",
    ]
    code, out = await exec_bytes(argv, None, _CONTROL_TIMEOUT_S)
    if code != 0:
        raise SandboxUnavailable(
            f"docker could not start a sandbox from image {config.docker_image!r}: "
            f"{out.decode('utf-8', 'replace').strip()}"
        )
    return DockerSandbox(config, name)
