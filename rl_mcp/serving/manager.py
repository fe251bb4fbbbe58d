"""`ServeManager`: a run's weights served on a loopback port by the standalone inference server,
one process per served model. Each runs in a session of its own, so it outlives the server that
started it (and a client's kill of that server); the next server re-adopts it from its record by
pid and start time, as runs are. Stopped by rl_stop_served_model, or at the server's exit with
--stop-runs-on-exit. A second serve of the same weights answers with the one already serving."""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import anyio

from rl_mcp.inference.target import child_env
from rl_mcp.logs import tail_lines
from rl_mcp.model_build import build_models
from rl_mcp.processes import Child, StageError, adopt, health_ok, probe_client, spawn, stop, wait_ready
from rl_mcp.runs.ports import PortReservations
from rl_mcp.runs.store import RunRecord
from rl_mcp.serving import memory
from rl_mcp.serving.clients import write_hermes_home
from rl_mcp.serving.plan import ServeError, ServePlan, plan_serve, server_argv, server_config
from rl_mcp.serving.registry import ServedRecord, ServedRegistry
from rl_mcp.session.run_config import write_run_config
from rl_mcp.settings import Settings

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 240.0  # under Hermes' 300 s tool timeout: a vLLM start or an engine download fits
STOP_GRACE_S = 5.0  # the server ends its requests and exits in well under a second
LOG_TAIL_LINES = 20
NOTE_EVERY_S = 2.0
# The inference server's exit codes (tinker_atropos/inference_server/__main__.py)
EXIT_MEANINGS = {
    1: "it could not load the model",
    2: "its config is invalid",
    3: "its backend is unavailable",
    5: "its port was taken",
}

Report = Callable[[str], Awaitable[None]]


@dataclass(frozen=True)
class Served:
    """A served model as it stands: its record and its process tree's resident memory now."""

    record: ServedRecord
    rss_bytes: int | None
    already_serving: bool = False


@dataclass(frozen=True)
class StoppedServe:
    record: ServedRecord
    was_running: bool
    exit_code: int | None


class ServeManager:
    def __init__(
        self,
        settings: Settings,
        runs: Callable[[str], RunRecord],
        ports: PortReservations | None = None,
        *,
        ready_timeout_s: float = READY_TIMEOUT_S,
    ) -> None:
        self.settings, self._runs = settings, runs
        self.ports = ports or PortReservations()
        self.ready_timeout_s = ready_timeout_s
        self.registry = ServedRegistry(settings.served_dir)
        self._children: dict[str, Child] = {}  # by model: ours (their exit codes), or adopted
        self._lock = anyio.Lock()  # one start at a time: a second serve of the same weights finds the first
        self._closed: anyio.Event | None = None

    def attach(self) -> None:
        """Re-adopt the served models an earlier lifetime (or the command line) left serving; forget the
        records of those that are gone."""
        for rec in self.registry.records():
            if self._child(rec) is not None:
                log.info("re-adopted served model %s (pid %d, %s)", rec.model, rec.pid, rec.url)

    # ------------------------------------------------------------------ serve

    def plan(self, run_id: str, wanted: str | int | None) -> ServePlan:
        """What serving the run's `wanted` weights means (an unknown run, or one without weights, refused)."""
        return plan_serve(self._runs(run_id), wanted)

    async def serve(self, plan: ServePlan, *, port: int | None = None, report: Report | None = None) -> Served:
        """The plan's weights serving once /health answers 200: started, or the one already serving them.
        A taken port or too little memory starts nothing."""
        async with self._lock:
            for served in self.list():
                if served.record.model == plan.model:
                    child = self._child(served.record)
                    if child is not None and served.record.status != "ready":  # another process starts it
                        await self._wait_healthy(child, served.record, report)
                    return Served(served.record, served.rss_bytes, already_serving=True)
            return await self._start(plan, port, report)

    async def _start(self, plan: ServePlan, port: int | None, report: Report | None) -> Served:
        est, space = memory.estimate(plan, self.settings.environ), memory.room(self.settings.serve_memory_limit_bytes)
        memory.check_fits(plan, est, space)
        port = self._reserve(port)
        try:
            rec, child = await self._spawn(plan, port, est, space, report)
            try:
                await self._wait_healthy(child, rec, report)
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await self._end(rec, child)
                raise
        finally:
            self.ports.release([port])
        write_hermes_home(rec.files, rec.model, rec.url)
        rec.status = "ready"
        self.registry.save(rec)
        log.info("serving %s at %s (pid %d, adapter %s)", rec.model, rec.url, rec.pid, rec.weights)
        return Served(rec, memory.tree_rss(child))

    async def _spawn(
        self, plan: ServePlan, port: int, est: memory.MemoryEstimate, space: memory.MemoryRoom, report: Report | None
    ) -> tuple[ServedRecord, Child]:
        """The model's folder written afresh, its offline model built where it is not, its server started and
        recorded (`starting`)."""
        files = self.registry.files(plan.model)
        shutil.rmtree(files.folder, ignore_errors=True)  # an earlier serve's log would read as this one's
        files.folder.mkdir(parents=True)
        config = server_config(plan, port, files.folder)
        write_run_config(files.config, config)
        env = child_env(self.settings.environ, plan.target)
        if report is not None:
            await report(f"serving {plan.model} ({plan.chosen_because}) on port {port}")
        python, log_path = self.settings.python, files.server_log
        await build_models(config, python=python, env=env, log=log_path, timeout_s=self.ready_timeout_s)
        child = spawn(plan.model, server_argv(python, files.config, plan), log_path=log_path, env=env)
        rec = ServedRecord(
            model=plan.model,
            run_id=plan.run_id,
            checkpoint=plan.checkpoint.name,
            checkpoint_step=plan.checkpoint.step,
            chosen_because=plan.chosen_because,
            weights=plan.checkpoint.path,
            base_model=plan.base_model,
            backend=plan.backend,
            sampler=plan.sampler,
            port=port,
            pid=child.pid,
            create_time=child.create_time,
            started_at=time.time(),
            folder=str(files.folder),
            estimate_bytes=est.bytes,
            estimate_basis=est.basis,
            available_bytes=space.available_bytes,
        )
        self.registry.save(rec)
        self._children[rec.model] = child
        return rec, child

    def _reserve(self, port: int | None) -> int:
        if port is None:
            return self.ports.reserve(1)[0]
        if self.ports.reserve_exact(port) is None:
            raise ServeError(f"port {port} is in use on 127.0.0.1: pick another, or leave port out for a free one")
        return port

    async def _wait_healthy(self, child: Child, rec: ServedRecord, report: Report | None) -> None:
        """Until /health answers 200; a ServeError naming the log's tail if the server exits or is not ready
        within the timeout."""
        started, noted = time.monotonic(), time.monotonic()
        async with probe_client() as http:

            async def healthy() -> bool:
                nonlocal noted
                if report is not None and time.monotonic() - noted >= NOTE_EVERY_S:
                    noted = time.monotonic()
                    await report(f"loading {rec.model} on port {rec.port} ({noted - started:.0f} s)")
                return await health_ok(http, f"http://127.0.0.1:{rec.port}/health")

            try:
                await wait_ready("serve", child, healthy, timeout_s=self.ready_timeout_s)
            except StageError as exc:
                why = EXIT_MEANINGS.get(exc.exit_code, "") if exc.exit_code is not None else ""
                tail = "\n".join(tail_lines(rec.log, LOG_TAIL_LINES))
                raise ServeError(
                    f"the inference server serving {rec.model} did not start: {exc}{f' ({why})' if why else ''}; "
                    f"its log {rec.log} ends:\n{tail}"
                ) from exc

    async def foreground(self, rec: ServedRecord) -> int | None:
        """Serve in the foreground (`mcp-server-rl serve-model`): while the process serves; stopped when the
        caller is cancelled (a signal to the command). Its exit code where it ended otherwise."""
        child = self._child(rec)
        try:
            while child is not None and child.running:
                await anyio.sleep(0.5)
        finally:
            with anyio.CancelScope(shield=True):
                await self._end(rec, child)
        return child.poll() if child is not None else None

    # ------------------------------------------------------------------ list, stop

    def list(self) -> list[Served]:
        """The models serving now (re-adopted where an earlier lifetime started them), oldest first."""
        out = []
        for rec in self.registry.records():
            child = self._child(rec)
            if child is not None:
                out.append(Served(rec, memory.tree_rss(child)))
        return out

    async def stop(self, model: str) -> StoppedServe:
        rec = self.registry.get(model)
        if rec is None:
            serving = ", ".join(s.record.model for s in self.list()) or "none"
            raise ServeError(f"no served model {model!r}; serving now: {serving} (rl_list_served_models)")
        child = self._child(rec)
        code = await self._end(rec, child) if child is not None else None
        return StoppedServe(rec, child is not None, code)

    async def _end(self, rec: ServedRecord, child: Child | None) -> int | None:
        """Stop the process tree (if any) and drop the record."""
        code = await stop(child, grace_s=STOP_GRACE_S) if child is not None else None
        self.registry.remove(rec.model)
        self._children.pop(rec.model, None)
        log.info("stopped serving %s (pid %d)", rec.model, rec.pid)
        return code

    def _child(self, rec: ServedRecord) -> Child | None:
        """The running process of `rec`, adopted on first sight; None (and the record dropped) once it is gone."""
        child = self._children.get(rec.model)
        if child is None or child.pid != rec.pid:
            child = adopt(rec.model, rec.pid, rec.create_time, rec.log)
        if child is None or not child.running:
            log.info("served model %s (pid %d) is gone: its record dropped", rec.model, rec.pid)
            self.registry.remove(rec.model)
            self._children.pop(rec.model, None)
            return None
        self._children[rec.model] = child
        return child

    # ------------------------------------------------------------------ exit

    async def shutdown(self, *, stop_served: bool) -> None:
        """Once (a second call waits for the first): the served models keep serving for the next server,
        unless `stop_served` (--stop-runs-on-exit)."""
        if self._closed is not None:
            await self._closed.wait()
            return
        self._closed = closed = anyio.Event()
        with anyio.CancelScope(shield=True):
            try:
                served = self.list()
                if not stop_served:
                    if served:
                        log.info("served models keep serving: %s", ", ".join(s.record.model for s in served))
                    return
                async with anyio.create_task_group() as tg:
                    for one in served:
                        tg.start_soon(partial(self._end, one.record, self._children.get(one.record.model)))
            finally:
                closed.set()
