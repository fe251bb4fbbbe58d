"""The engine a profile trains on, managed: started on first use, shared by runs, stopped when idle.

It runs in a `processes.supervised` block inside the app's task group, so it lives at most as long as
the server (its runs cannot outlive it: the server stops them first at exit). It also stops once
nothing has used it for `idle_stop_s`: no active run (`in_use`) and no `hold` (an export or an
inference test downloading a checkpoint); the next user starts it again. Its port is chosen when the
service is made, so run configs can name its URL before it has started.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx

from rl_mcp import processes
from rl_mcp.engines.diagnosis import explain_exit
from rl_mcp.engines.skyrl import (
    CRASH_MARKER,
    READY_MARKER,
    VENV_VAR,
    EngineSetupError,
    SkyrlSpec,
    check_model,
    check_venv,
)
from rl_mcp.logs import tail_lines
from rl_mcp.processes import Child, StageError
from rl_mcp.runtimes import ensure_runtime
from rl_mcp.runtimes.maker import RuntimeUnavailable
from rl_mcp.settings import Settings, without_secrets
from tinker_atropos.http_tls import shared_tls

log = logging.getLogger(__name__)
Report = Callable[[str], Awaitable[None]]
ENGINE_PROCESS = "skyrl-engine"


class EngineService:
    """One managed SkyRL engine for the server's profile."""

    def __init__(
        self,
        settings: Settings,
        spec: SkyrlSpec,
        tg: anyio.abc.TaskGroup,
        start_timeout_s: float,
        idle_stop_s: float | None = None,
        in_use: Callable[[], bool] = lambda: False,
    ) -> None:
        self.settings = settings
        self.spec = spec
        self._tg = tg
        self._start_timeout_s = start_timeout_s
        self.idle_stop_s = idle_stop_s  # None: up until the server exits
        self._in_use = in_use
        self._holds = 0
        self._used_at = time.monotonic()
        self._lock = anyio.Lock()
        self._stop = anyio.Event()
        self._stopped = anyio.Event()
        self._child: Child | None = None
        self._crash: _LogMarker | None = None  # the API server's line when its engine process dies
        self.started_at: float | None = None
        self.exit_code: int | None = None

    @property
    def url(self) -> str:
        return self.spec.url

    @property
    def log_path(self) -> Path:
        return self.spec.state_dir / "engine.log"

    @property
    def running(self) -> bool:
        """Up and not being stopped."""
        return self._child is not None and self._child.running and not self._stop.is_set()

    async def ensure_running(self, report: Report | None = None) -> str:
        """The engine's URL once it answers; starts it when it is not running (minutes the first time:
        imports, the model, XLA compiles). StageError with its diagnosis when it cannot start."""
        async with self._lock:
            if self._child is not None and self._stop.is_set():
                await self._stopped.wait()  # an idle stop under way: its port is free once it is done
            if self.running:
                return self.url
            try:
                if not self.settings.environ.get(VENV_VAR):  # the product's runtime: made on first use
                    await ensure_runtime("skyrl-engine", self.settings.environ, report)
                check_venv(self.spec.venv, self.settings.environ)
                check_model(self.spec.model_name, self.spec.model_dir)
            except (EngineSetupError, RuntimeUnavailable) as exc:
                raise StageError("engine", str(exc), None, ENGINE_PROCESS) from exc
            if report is not None:
                await report(f"starting SkyRL's Tinker engine at {self.url} (log: {self.log_path})")
            self._stop, self._stopped = anyio.Event(), anyio.Event()
            try:
                self._child = await self._tg.start(self._serve)
            except StageError as exc:
                raise StageError("engine", self._failure(str(exc)), exc.exit_code, ENGINE_PROCESS) from exc
            return self.url

    @asynccontextmanager
    async def hold(self, report: Report | None = None) -> AsyncIterator[str]:
        """The engine, running and kept up for the block (a checkpoint download that is not a run's)."""
        self._holds += 1
        try:
            yield await self.ensure_running(report)
        finally:
            self._holds -= 1
            self._used_at = time.monotonic()

    def _idle_for(self) -> float:
        """Seconds since anything last used the engine (0 while something does)."""
        if self._holds or self._in_use():
            self._used_at = time.monotonic()
        return time.monotonic() - self._used_at

    async def stop(self) -> None:
        """Stop the engine (its runs should be stopped first: their final saves go through it)."""
        if self._child is None:
            return
        self._stop.set()
        with anyio.CancelScope(shield=True):
            await self._stopped.wait()

    def died(self) -> str | None:
        """Why the engine is gone, when it exited without being asked to (None while it runs)."""
        if self._child is None or self._stop.is_set():
            return None
        crash = self._crash.line if self._crash is not None and self._crash.seen() else None
        what = engine_death(self._child.poll(), crash)
        return None if what is None else self._failure(what)

    def state(self) -> dict[str, Any]:
        """What doctor and rl://profile show."""
        child = self._child
        return {
            "kind": "skyrl",
            "url": self.url,
            "running": self.running,
            "idle_stop_s": self.idle_stop_s,
            "pid": child.pid if child is not None and child.running else None,
            "exit_code": None if child is None else child.poll(),
            "venv": str(self.spec.venv),
            "model": self.spec.model_name,
            "model_dir": str(self.spec.model_dir),
            "backend_config": dict(self.spec.backend_config),
            "log": str(self.log_path),
            "problem": self.died(),
        }

    async def _serve(self, *, task_status: anyio.abc.TaskStatus[Child]) -> None:
        self.spec.state_dir.mkdir(parents=True, exist_ok=True)
        env = self.spec.env(without_secrets(self.settings.environ))
        marker = _LogMarker(self.log_path, READY_MARKER)
        self._crash = _LogMarker(self.log_path, CRASH_MARKER)
        async with httpx.AsyncClient(timeout=5.0, verify=shared_tls()) as http:

            async def ready() -> bool:
                return marker.seen() and await processes.health_ok(http, f"{self.url}/api/v1/healthz")

            try:
                async with processes.supervised(
                    ENGINE_PROCESS,
                    self.spec.argv(),
                    log_path=self.log_path,
                    env=env,
                    cwd=self.spec.state_dir,
                    ready=ready,
                    ready_timeout_s=self._start_timeout_s,
                    stop_grace_s=10.0,
                ) as child:
                    self.started_at = time.time()
                    self._used_at = time.monotonic()  # the idle clock starts when the engine is up
                    log.info("SkyRL engine ready at %s (pid %d)", self.url, child.pid)
                    task_status.started(child)
                    while child.running and not self._stop.is_set():
                        with anyio.move_on_after(1.0):
                            await self._stop.wait()
                        if self.idle_stop_s is not None and self._idle_for() >= self.idle_stop_s:
                            log.info("stopping the SkyRL engine: unused for %.0f s", self.idle_stop_s)
                            self._stop.set()
                    if not self._stop.is_set():
                        log.error("%s", self.died())
                    if self._crash.seen():  # nothing left to save: its API server would wait out its own
                        await processes.stop(child, grace_s=1.0)  # 10 s for requests that cannot finish
            finally:
                self._stopped.set()

    def _failure(self, what: str) -> str:
        return explain_exit(what, tail_lines(self.log_path, 40), self.log_path)


def engine_death(api_exit_code: int | None, crash_line: str | None) -> str | None:
    """What ended the engine (None: it runs). The API server outlives its engine process by up to
    10 s, then exits itself (code 143): the crash line it logged is the cause, up or not, quoted
    itself because the log's tail soon fills with the requests that finish as the server stops."""
    if crash_line is not None:
        return f"SkyRL's Tinker engine process died (its API server logged: {crash_line})"
    if api_exit_code is None:
        return None
    return f"SkyRL's Tinker engine exited with code {api_exit_code}"


class _LogMarker:
    """Whether a line holding `marker` was written to the log since this start (read as it grows),
    and that line."""

    def __init__(self, path: Path, marker: str) -> None:
        self.path, self.marker = path, marker
        self.offset = path.stat().st_size if path.exists() else 0
        self.found = False
        self.line = ""
        self._partial = b""  # the last line read, until its end comes

    def seen(self) -> bool:
        if not self.found:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.offset)
                    chunk = f.read()
            except OSError:
                return False
            self.offset += len(chunk)
            text = self._partial + chunk
            self._partial = text[text.rfind(b"\n") + 1 :]
            at = text.find(self.marker.encode())
            if at >= 0:
                end = text.find(b"\n", at)
                self.line = text[text.rfind(b"\n", 0, at) + 1 : end if end >= 0 else None].decode(errors="replace")
                self.found = True
        return self.found
