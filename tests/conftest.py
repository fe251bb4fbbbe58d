"""Shared fixtures: an isolated state dir for every test, real servers in-process or as processes."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import suite_timeline

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# Variables that would make a test depend on the machine it runs on.
_LEAKY_ENV = ("RL_MCP_PROFILE", "RL_MCP_ENV_DIRS", "RL_MCP_AUTH_TOKEN", "RL_MCP_INTROSPECT_TIMEOUT")
# The runtimes `make setup` made (`mcp-server-rl setup`, in the checkout's .runtimes/), also where pytest runs
# without make: the tests' servers and children find them here whatever their RL_MCP_HOME.
os.environ.setdefault("RL_MCP_RUNTIMES", str(ROOT / ".runtimes"))

# xdist's workers share the cores: torch in a worker, and in the children it starts that do not pick
# their own count (an export, a model build), takes its share of them, not all. Its OpenMP threads
# spin for cores the other worker holds: a GGUF round trip beside a busy core took 31 s with two
# threads, 23 s with one (a run's trainer and inference server already take half: configure_threads).
if workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0")):
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // workers)))


def pytest_configure(config: pytest.Config) -> None:
    suite_timeline.register(config)
    _math_attention_where_forced_kernels_lack_amx()


def _math_attention_where_forced_kernels_lack_amx() -> None:
    """torch 2.13's CPU flash attention in bfloat16 packs its blocks for AMX whenever the CPU has it,
    through a routine built only into the AVX-512 kernels: under the portable or AVX2 kernels (make
    test's `kernels` passes) on a CPU with AMX it raises "pack_vnni2 is only supported when avx512 is
    supported" from 64 tokens on. There the tests attend with the math kernel; elsewhere nothing changes."""
    if os.environ.get("ATEN_CPU_CAPABILITY", "").lower() not in ("default", "avx2"):
        return
    import torch

    if torch.cpu._is_amx_tile_supported():
        torch.backends.cuda.enable_flash_sdp(False)  # the flag of every device's flash attention, CPU's too


# Each file's worker-seconds in a full run (`bench/suite_profile.py TIMELINE --write-file-seconds`).
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Whole files (--dist loadfile), the longest first: xdist's own order (most tests first) left
    SkyRL's story, two tests long, to start last while the other worker sat idle for minutes."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    seconds: dict[str, float] = json.loads(FILE_SECONDS.read_text()) if FILE_SECONDS.exists() else {}

    class LongestFirst(LoadFileScheduling):
        ordered = False

        def _assign_work_unit(self, node: object) -> None:
            if not self.ordered:  # files not in the record (new ones) after, in collection order
                for scope in sorted(self.workqueue, key=lambda scope: -seconds.get(scope, 0.0)):
                    self.workqueue.move_to_end(scope)
                self.ordered = True
            super()._assign_work_unit(node)  # type: ignore[arg-type]

    return LongestFirst(config, log)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def introspection_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Shared by the whole session: introspecting an environment costs seconds (it imports atroposlib)."""
    return tmp_path_factory.mktemp("rl-mcp-cache")


@pytest.fixture(autouse=True)
def rl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, introspection_cache: Path) -> Path:
    """Every test gets its own RL_MCP_HOME: nothing touches ~/.rl-mcp."""
    home = tmp_path / "rl-home"
    home.mkdir()
    monkeypatch.setenv("RL_MCP_HOME", str(home))
    monkeypatch.setenv("RL_MCP_CACHE", str(introspection_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    for name in _LEAKY_ENV:
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def free_port() -> Callable[[], int]:
    """A port that was free a moment ago (prefer `--port 0` where the program supports it)."""

    def pick() -> int:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    return pick


@pytest.fixture
def mcp_app():
    """`async with mcp_app(profile="local") as (app, server)`: a real server for in-memory clients."""
    from rl_mcp.app import open_app
    from rl_mcp.mcp_api.server import build_server
    from rl_mcp.settings import Settings

    @asynccontextmanager
    async def start(profile: str | None = "local", **kwargs) -> AsyncIterator[tuple]:
        settings = Settings.from_env(profile=profile, **kwargs)
        async with open_app(settings) as app:
            yield app, build_server(app)

    return start


def _kill_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(grace)


class ServedProcess:
    """A running `mcp-server-rl serve` child: its Popen, URL (sse/http) and stderr log path."""

    def __init__(self, proc: subprocess.Popen, url: str | None, log: Path) -> None:
        self.proc, self.url, self.log = proc, url, log

    def stderr_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture
def rl_mcp_process(tmp_path: Path) -> Iterator[Callable[..., ServedProcess]]:
    """Start `python -m rl_mcp serve ARGS` in its own process group; killed (group) at teardown.

    For sse/http pass `--port 0`: the URL is read from the server's log line.
    """
    started: list[subprocess.Popen] = []

    def start(*args: str, env: dict[str, str] | None = None, timeout: float = 60.0) -> ServedProcess:
        log = tmp_path / f"serve-{len(started)}.log"
        proc = subprocess.Popen(
            [PYTHON, "-m", "rl_mcp", "serve", *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
            start_new_session=True,
        )
        started.append(proc)
        url = None
        if "--transport" in args and args[args.index("--transport") + 1] != "stdio":
            deadline = time.monotonic() + timeout
            while url is None:
                match = re.search(r"serving \w+ on (http://\S+)", log.read_text(errors="replace"))
                if match:
                    url = match.group(1)
                elif proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"server did not start (exit {proc.poll()}):\n{log.read_text()}")
                else:
                    time.sleep(0.05)
        return ServedProcess(proc, url, log)

    yield start
    for proc in started:
        _kill_group(proc)


PROBE_ENV = '''"""Probe: a small environment for rl-mcp's server tests."""
from typing import Literal

from pydantic import Field

from atroposlib.envs.base import BaseEnv, BaseEnvConfig


class ProbeConfig(BaseEnvConfig):
    difficulty: int = Field(3, ge=1, le=10, description="How hard the prompts are")
    mode: Literal["easy", "hard"] = Field("easy", description="Prompt style")


class ProbeEnv(BaseEnv):
    name = "probe"
    env_config_cls = ProbeConfig

    @classmethod
    def config_init(cls):
        return ProbeConfig(group_size=4, wandb_name="probe"), []


if __name__ == "__main__":
    ProbeEnv.cli()
'''

BROKEN_ENV = '''"""Broken: fails when imported (before any heavy import, so the failure is fast)."""
raise RuntimeError("probe import failure sentinel")

from atroposlib.envs.base import BaseEnv


class BrokenEnv(BaseEnv):
    name = "broken"
'''


@pytest.fixture(scope="session")
def probe_env_dirs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two env dirs: `probe` and `probe_two` (bounded fields), `broken` (import fails), a syntax error, a
    subclass through a shared base in another file, and in the second dir a duplicate `probe`.
    Session-scoped so each file is introspected once (it imports atroposlib)."""
    first = tmp_path_factory.mktemp("envs-a")
    second = tmp_path_factory.mktemp("envs-b")
    (first / "probe.py").write_text(PROBE_ENV)
    (first / "probe_two.py").write_text(
        PROBE_ENV.replace("ProbeEnv", "ProbeTwoEnv").replace('name = "probe"', 'name = "probe_two"')
    )
    (first / "broken.py").write_text(BROKEN_ENV)
    (first / "syntax_bad.py").write_text("from atroposlib.envs.base import BaseEnv\nclass Bad(BaseEnv:\n    pass\n")
    (first / "shared.py").write_text(
        "from atroposlib.envs.base import BaseEnv\n\nclass SharedBase(BaseEnv):\n    '''A base, not an env.'''\n"
    )
    (first / "child.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_suffix('.imported').write_text('x')\n"
        "from shared import SharedBase\n\nclass ChildEnv(SharedBase):\n    '''Child through a shared base.'''\n"
    )
    (second / "probe_again.py").write_text(PROBE_ENV.replace("ProbeEnv", "ProbeAgainEnv"))
    return first, second


@pytest.fixture
def probe_envs(probe_env_dirs: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """RL_MCP_ENV_DIRS pointing at the probe env dirs."""
    monkeypatch.setenv("RL_MCP_ENV_DIRS", os.pathsep.join(str(d) for d in probe_env_dirs))
    return probe_env_dirs
