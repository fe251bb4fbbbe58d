"""Where a test run's time goes: one JSON line per test phase, read by `bench/suite_profile.py`.

On when `RL_MCP_SUITE_TIMELINE` names a folder (`make test` sets it). Each xdist worker appends to its
own `<worker>.jsonl`: the phase's start and stop, its fixed sleeps and CPU seconds in this process,
and the processes the test started, sampled in a thread (their kind, read from the command line, and the CPU seconds
they used). Sampling reads /proc twice a second; it does not slow the test it measures.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

# A descendant's kind, by the first of these found in its command line.
KINDS = (
    ("skyrl engine", ("skyrl.tinker",)),
    ("trainer", ("tinker_atropos.trainer.launch", "launch_training")),
    ("inference server", ("tinker_atropos.inference_server",)),
    ("run-api", ("run-api", "run_api")),
    ("verifiers child", ("classic_child", "v1_child")),
    ("sft stage", ("tinker_atropos.sft.stage",)),  # a run's supervised stage, or a preview
    ("openenv server", ("openenv/serve.py",)),  # an OpenEnv folder's app, in the OpenEnv venv
    ("verifiers program", ("runtimes/verifiers",)),  # a harness program or tool server a rollout starts
    ("mcp tool server", ("mcp-server-", "mcp_server_")),
    ("pytest", ("-m pytest", "bin/pytest")),  # a suite a test runs (an example's own tests)
    ("package install", (" pip ", "-m pip", "/uv ", "uv pip")),
    ("warm template", ("rl_mcp.children.warm_template",)),  # imports the heavy libraries, forks children
    (
        "rl-mcp server",
        ("rl_mcp serve", "mcp-server-rl serve", "rl-mcp serve", "rl_mcp demo", "mcp-server-rl demo", "rl-mcp demo"),
    ),
    ("environment", ("env_process", " serve", " process")),
    ("model build", ("model_build", "tinker_atropos.models")),
    ("export", ("tinker_atropos.export",)),
    ("introspection", ("children.introspect", "children/introspect")),
    ("sandbox", ("bwrap",)),
    ("hermes", ("hermes",)),
    ("node", ("node",)),
    ("chromium", ("chromium", "chrome")),
)


def kind_of(cmdline: str) -> str:
    for kind, needles in KINDS:
        if any(n in cmdline for n in needles):
            return kind
    return "other"


class _Sampler:
    """Every descendant of this worker, sampled: the CPU seconds each one used, by kind."""

    def __init__(self, interval_s: float = 0.5) -> None:
        self.interval_s = interval_s
        self.seen: dict[tuple[int, float], tuple[str, float]] = {}  # (pid, create_time) -> (kind, cpu s)
        self._lock = threading.Lock()
        self._taken: dict[tuple[int, float], float] = {}  # CPU seconds already counted, by process
        self._tick = threading.Event()  # never set: its wait is a sleep that _Sleeps does not count
        self._me = psutil.Process()
        threading.Thread(target=self._run, name="suite-timeline", daemon=True).start()

    def _run(self) -> None:
        while not self._tick.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        try:
            children = self._me.children(recursive=True)
        except psutil.Error:
            return
        for proc in children:
            try:
                with proc.oneshot():
                    key = (proc.pid, proc.create_time())
                    times = proc.cpu_times()
                    cpu = times.user + times.system
                    kind = self.seen.get(key, (None, 0.0))[0] or kind_of(" ".join(proc.cmdline()))
            except psutil.Error:
                continue
            with self._lock:
                self.seen[key] = (kind, cpu)

    def take(self) -> tuple[dict[str, float], dict[str, int]]:
        """CPU seconds and process counts by kind since the last take (a process counted once)."""
        self.sample()
        cpu: dict[str, float] = {}
        count: dict[str, int] = {}
        with self._lock:
            for key, (kind, used) in self.seen.items():
                cpu[kind] = cpu.get(kind, 0.0) + max(0.0, used - self._taken.get(key, 0.0))
                if key not in self._taken:
                    count[kind] = count.get(kind, 0) + 1
            self.seen = {k: v for k, v in self.seen.items() if _alive(k[0])}
            self._taken = {k: v[1] for k, v in self.seen.items()}
        return cpu, count


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


class _Sleeps:
    """Seconds the test's own thread spent in fixed sleeps (time.sleep, asyncio.sleep under anyio):
    the threads of the libraries a test uses (an SDK's heartbeat loop) sleep for their own reasons."""

    def __init__(self) -> None:
        self.total = 0.0
        real_sleep, real_async_sleep = time.sleep, asyncio.sleep

        def sleep(seconds: float) -> None:
            self._count(seconds)
            real_sleep(seconds)

        async def async_sleep(delay: float, result: Any = None) -> Any:
            self._count(delay)
            return await real_async_sleep(delay, result)

        time.sleep = sleep
        asyncio.sleep = async_sleep  # type: ignore[assignment]

    def _count(self, seconds: float) -> None:
        if threading.current_thread() is threading.main_thread():
            self.total += max(0.0, seconds)


class Timeline:
    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.path = folder / f"{worker}.jsonl"
        self.worker = worker
        self.sleeps = _Sleeps()
        self.sampler = _Sampler()
        self._slept = 0.0
        self._own_cpu = 0.0

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self.sampler.take()  # what ran between tests is not this test's
        self._slept, self._own_cpu = self.sleeps.total, _own_cpu()
        yield
        cpu, count = self.sampler.take()
        self._write(
            {
                "nodeid": item.nodeid,
                "when": "processes",
                "worker": self.worker,
                "sleep_s": round(self.sleeps.total - self._slept, 2),
                "child_cpu_s": {k: round(v, 2) for k, v in cpu.items()},
                "children": count,
                "own_cpu_s": round(_own_cpu() - self._own_cpu, 2),  # in-process servers, models
            }
        )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._write(
            {
                "nodeid": report.nodeid,
                "when": report.when,
                "worker": self.worker,
                "start": report.start,
                "stop": report.stop,
                "outcome": report.outcome,
            }
        )

    def _write(self, line: dict[str, Any]) -> None:
        line["pid"] = os.getpid()  # a worker of the kernel passes, or a pytest a test runs, is another
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")


def _own_cpu() -> float:
    times = os.times()
    return times.user + times.system


def register(config: pytest.Config) -> None:
    """From conftest's pytest_configure: each worker records its own tests (the controller none)."""
    folder = os.environ.get("RL_MCP_SUITE_TIMELINE")
    xdist_controller = not hasattr(config, "workerinput") and bool(config.getoption("numprocesses", None))
    if folder and not xdist_controller and not config.pluginmanager.has_plugin("suite-timeline"):
        config.pluginmanager.register(Timeline(Path(folder)), "suite-timeline")
