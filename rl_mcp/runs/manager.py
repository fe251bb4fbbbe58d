"""The run lifecycle: start in stages, supervise, stop, re-adopt after a restart.

One `RunManager` per server process, used as an async context manager (it owns its HTTP client
and, on exit, ends supervision). Its tasks run in the anyio task group that `main()` holds
(outside the MCP SDK's per-connection lifespan), so a client disconnecting never touches a run.
Children run in their own sessions and outlive the server unless asked to stop with it (exit_stop.py).
"""

from __future__ import annotations

import builtins
import logging
import time
from pathlib import Path
from types import TracebackType

import anyio
from anyio.abc import TaskGroup

from rl_mcp import processes, tmpdirs
from rl_mcp.engines.service import EngineService
from rl_mcp.logs import tail_lines
from rl_mcp.processes import Child, StageError
from rl_mcp.runs import stages
from rl_mcp.runs.env_health import stalled
from rl_mcp.runs.exit_stop import ENGINE_EXIT_REASON, stop_on_exit
from rl_mcp.runs.live import Live, Progress, RunEvents, RunPlan, no_progress, read_run_identity
from rl_mcp.runs.outcomes import ADOPTED_EXIT, settle_exit
from rl_mcp.runs.ports import PortReservations
from rl_mcp.runs.preflight import RunError, preflight, unknown_run
from rl_mcp.runs.stages import StageTimeouts
from rl_mcp.runs.store import ProcessRecord, RunRecord, RunStore, new_run_id
from rl_mcp.runs.vocab import RunStatus, Stage
from rl_mcp.settings import Settings
from tinker_atropos.run_files import ProcessName, read_result

log = logging.getLogger(__name__)

STOP_ORDER = (ProcessName.ENV, ProcessName.TRAINER, ProcessName.API)
FAILURE_TAIL_LINES = 20
SUPERVISE_INTERVAL_S = 0.2  # a child's exit is noticed within this (the contract says 2 s)
START_PROGRESS = {Stage.TRAINER: 4.0, Stage.ENV: 5.0}


class RunManager:
    def __init__(
        self,
        settings: Settings,
        *,
        store: RunStore | None = None,
        events: RunEvents | None = None,
        timeouts: StageTimeouts | None = None,
        stop_grace_s: float = 30.0,
        engine: EngineService | None = None,  # the managed engine its runs train on (skyrl profile)
    ) -> None:
        self.settings, self.engine = settings, engine
        self.store = store or RunStore(settings.home / "runs.sqlite")
        self.events = events or RunEvents()
        self.timeouts = timeouts or StageTimeouts()
        self.stop_grace_s = stop_grace_s
        self.ports = PortReservations(self.store.ports_in_use)
        self._live: dict[str, Live] = {}
        self._tg: TaskGroup | None = None
        self._http = processes.probe_client()
        self._closed: anyio.Event | None = None  # set once shutdown is done

    # ------------------------------------------------------------------ lifetime

    async def __aenter__(self) -> RunManager:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown(stop_runs=self.settings.stop_runs_on_exit)

    async def attach(self, tg: TaskGroup) -> None:
        """Take the server's task group and re-adopt the runs an earlier lifetime left behind."""
        self._tg = tg
        for rec in self.store.list():
            if rec.active:
                await self._recover(rec)

    async def shutdown(self, *, stop_runs: bool) -> None:
        """End supervision, once (a second call waits for the first); running runs keep going unless
        `stop_runs` (--stop-runs-on-exit). Runs still starting are stopped too (exit_stop.py)."""
        if self._closed is not None:
            await self._closed.wait()
            return
        self._closed = closed = anyio.Event()
        with anyio.CancelScope(shield=True):
            try:
                lives, grace, save = list(self._live.values()), self.stop_grace_s, self._save
                reason = ENGINE_EXIT_REASON if self.engine is not None else None  # runs cannot outlive it
                await stop_on_exit(self.settings, lives, stop_runs=stop_runs, grace_s=grace, save=save, reason=reason)
                if self.engine is not None:
                    await self.engine.stop()
                await self._http.aclose()
            finally:
                closed.set()

    # ------------------------------------------------------------------ start

    def preflight(self, plan: RunPlan) -> None:
        preflight(self.settings, plan.environment, plan.env_file)

    async def start(self, plan: RunPlan, *, progress: Progress | None = None, wait: bool = False) -> RunRecord:
        """Pre-flight, write the config, record the run, and start it in the background.

        Returns at once (status `starting`) unless `wait`, then when it is running or has failed.
        """
        if self._tg is None:
            raise RuntimeError("RunManager.attach() was not called")
        report = progress or no_progress
        total = 6.0 if wait else 3.0
        self.preflight(plan)
        await report(1, total, "pre-flight passed")
        api_port, inference_port = self.ports.reserve(2)
        try:
            rec = self._record_new_run(plan, api_port, inference_port)
            await report(2, total, f"config written: {rec.config_path}")
        except BaseException:
            self.ports.release([api_port, inference_port])
            raise
        live = Live(rec=rec, ports_reserved=[api_port, inference_port], module_home=plan.module_home)
        self._live[rec.run_id] = live
        self._tg.start_soon(self._run, live, plan.env_file)
        self.events.runs_list_changed()
        await report(3, total, f"run {rec.run_id} recorded; starting run-api")
        if wait:
            seen: set[Stage] = set()
            while not live.settled.is_set():
                stage = live.rec.stage
                if stage in START_PROGRESS and stage not in seen:
                    seen.add(stage)
                    await report(START_PROGRESS[stage], total, f"{stage} starting")
                await live.changed.wait()
            await report(total, total, f"run {rec.run_id} is {live.rec.status}")
        return live.rec

    def _record_new_run(self, plan: RunPlan, api_port: int, inference_port: int) -> RunRecord:
        run_id = new_run_id(plan.environment)
        run_dir = self.settings.runs_dir / run_id
        run_dir.mkdir(parents=True, exist_ok=True)
        in_use = {r.run_name for r in self.store.list()} if not plan.keeps_run_name else set()
        taken = plan.run_name is None or plan.run_name in in_use
        config_path = plan.write_config(run_dir, api_port, inference_port, run_id if taken else str(plan.run_name))
        run_name, total_steps = read_run_identity(config_path, run_id)
        rec = RunRecord(
            run_id=run_id,
            environment=plan.environment,
            profile=self.settings.profile.name,
            status=RunStatus.STARTING,
            stage=Stage.API,
            run_dir=str(run_dir),
            config_path=str(config_path),
            run_name=run_name,
            total_steps=total_steps,
            api_port=api_port,
            inference_port=inference_port,
            created_at=time.time(),
            **(plan.lineage.record_fields() if plan.lineage else {}),
        )
        rec.files.logs_dir.mkdir(parents=True, exist_ok=True)
        self.store.insert(rec)
        return rec

    async def _run(self, live: Live, env_file: Path) -> None:
        rec = live.rec
        try:
            with live.scope:
                try:
                    await self._start_stages(live, env_file)
                except StageError as err:
                    await self._fail(live, err)
                    return
                await self._supervise(live)
        except Exception as exc:  # a bug or an OS error fails this run, never the server's task group
            await self._fail_unexpectedly(live, exc)
        finally:
            self.ports.release(live.ports_reserved)
            live.settle()
            live.done.set()
            if not rec.active:
                self._live.pop(rec.run_id, None)

    async def _start_stages(self, live: Live, env_file: Path) -> None:
        """run-api, then the trainer and the environment together (docs/run-files.md: readiness), awaited in order."""
        rec = live.rec
        for stage, prepare in stages.preparations(self.settings, rec, env_file, self.engine, self.timeouts):
            self._enter(live, stage)
            await prepare()
        if stages.ended_by_sft(rec):  # `then: stop`: the supervised stage was the whole run
            return await self._finish(live, RunStatus.COMPLETED, None)
        plans = stages.stage_plans(self.settings, rec, env_file, self._http)
        # All three start at once: the trainer's imports and model load and the environment's atroposlib
        # import overlap run-api's start. The order still holds, as the trainer retries its registration
        # until run-api answers, and run-api holds the environment's until the trainer has asked for a batch.
        for plan in plans:
            self._spawn(live, ProcessName(plan.stage), plan.argv)
        for plan in plans:
            stage = plan.stage
            self._enter(live, stage)
            ready, limit = stages.guarded(live.children, stage, plan.ready), self.timeouts.of(stage)
            await processes.wait_ready(stage, live.children[ProcessName(stage)], ready, timeout_s=limit)
            bound = {Stage.API: rec.api_port, Stage.TRAINER: rec.inference_port}.get(stage)
            if bound is not None and bound in live.ports_reserved:  # bound now: nobody else can take it
                live.ports_reserved.remove(bound)
                self.ports.release([bound])
        rec.status, rec.stage, rec.running_at = RunStatus.RUNNING, None, time.time()
        self._save(rec)
        live.settle()
        log.info("run %s running", rec.run_id)

    def _enter(self, live: Live, stage: Stage) -> None:
        live.rec.stage = stage
        self._save(live.rec)
        live.touch()

    def _spawn(self, live: Live, name: ProcessName, argv: list[str]) -> Child:
        rec = live.rec
        env = stages.child_env(self.settings, rec, name)
        child = processes.spawn(name, argv, log_path=rec.log_path(name), env=env, cwd=Path(rec.run_dir))
        live.children[name] = child
        rec.processes[name] = ProcessRecord(
            pid=child.pid,
            create_time=child.create_time,
            argv=argv,
            log_path=str(child.log_path),
            started_at=time.time(),
        )
        return child

    # ------------------------------------------------------------------ supervision

    async def _supervise(self, live: Live) -> None:
        """Watch the children until the run ends; exits are noticed within SUPERVISE_INTERVAL_S."""
        rec = live.rec
        while rec.active:
            if why := stages.engine_problem(self.engine):  # before the trainer's own failure says less
                return await self._finish(live, RunStatus.FAILED, why, tail_of=ProcessName.TRAINER)
            for name in ProcessName:
                child = live.children.get(name)
                if child is None or rec.processes[name].exit_code is not None:
                    continue
                code = child.poll()
                if code is None:
                    continue
                self._mark_exit(rec, name, code)
                await self._on_exit(live, name, code)
                if not rec.active:
                    return
            if why := stalled(rec.files.env_health, rec.running_at, self.settings.env_limits):
                return await self._finish(live, RunStatus.FAILED, why, tail_of=ProcessName.ENV)
            await anyio.sleep(SUPERVISE_INTERVAL_S)

    async def _on_exit(self, live: Live, name: ProcessName, code: int) -> None:
        settlement = settle_exit(name, code, read_result(Path(live.rec.run_dir)))
        if settlement is None:
            log.info("run %s: %s finished its work (exit %s)", live.rec.run_id, name, code)
            self._save(live.rec)
            return
        await self._finish(live, settlement.status, settlement.error, tail_of=settlement.tail_of)

    def _mark_exit(self, rec: RunRecord, name: str, code: int | None) -> None:
        proc = rec.processes[name]
        proc.exit_code = code if code is not None else ADOPTED_EXIT
        proc.ended_at = time.time()

    async def _finish(self, live: Live, status: RunStatus, error: str | None, *, tail_of: str | None = None) -> None:
        """Stop what is left (env -> trainer -> API) and record the final state."""
        rec = live.rec
        rec.status = RunStatus.STOPPING
        self._save(rec)
        with anyio.CancelScope(shield=True):
            await self._stop_children(live)
        tmpdirs.remove_run_tmpdir(rec.files)  # what killed children left in their TMPDIR goes too
        rec.status, rec.error, rec.ended_at = status, live.explained(error, tail_of), time.time()
        if tail_of is not None:
            rec.log_tail = tail_lines(rec.log_path(tail_of), FAILURE_TAIL_LINES)
        self._save(rec)
        live.settle()
        log.info("run %s %s%s", rec.run_id, status, f": {error}" if error else "")

    async def _fail(self, live: Live, err: StageError) -> None:
        rec = live.rec
        rec.stage = Stage(err.stage)
        if err.exit_code is not None and err.process in rec.processes:
            self._mark_exit(rec, err.process, err.exit_code)
        await self._finish(live, RunStatus.FAILED, f"stage {err.stage} failed: {err}", tail_of=err.process)

    async def _fail_unexpectedly(self, live: Live, exc: Exception) -> None:
        log.exception("run %s: unexpected error", live.rec.run_id)
        try:
            await self._finish(live, RunStatus.FAILED, f"{type(exc).__name__}: {exc}")
        except Exception:  # e.g. the registry is unwritable too: the processes are stopped, say so in the log
            log.exception("run %s: could not record the failure", live.rec.run_id)
            live.rec.status = RunStatus.FAILED
            live.settle()

    async def _stop_children(self, live: Live) -> None:
        for name in STOP_ORDER:
            child = live.children.get(name)
            if child is None:
                continue
            grace = self.stop_grace_s if name == ProcessName.TRAINER else min(self.stop_grace_s, 10.0)
            code = await processes.stop(child, grace_s=grace)
            if live.rec.processes[name].exit_code is None:
                self._mark_exit(live.rec, name, code)

    # ------------------------------------------------------------------ stop / recover

    async def stop(self, run_id: str, *, reason: str | None = None) -> RunRecord:
        rec = self.get(run_id)
        live = self._live.get(run_id)
        if live is None and rec.active:  # recorded active, supervised by no one here: stop by pid
            live = self._adopt(rec)
            live.done.set()
        if live is None or not live.rec.active:
            return rec
        if live.stop_requested:
            with anyio.CancelScope(shield=True):
                await live.done.wait()
            return live.rec
        live.stop_requested = True
        live.scope.cancel()
        with anyio.CancelScope(shield=True):
            await live.done.wait()
            if live.rec.active:
                await self._finish(live, RunStatus.STOPPED, reason)
        self._live.pop(run_id, None)
        return live.rec

    async def _recover(self, rec: RunRecord) -> None:
        """A run an earlier server lifetime left active: adopt it, or settle it from its files."""
        live = self._adopt(rec)
        assert self._tg is not None
        live.settle()
        if rec.status == RunStatus.STARTING:
            why = f"the server exited while stage {rec.stage} was starting; start the run again"
            await self._finish(live, RunStatus.FAILED, why, tail_of=rec.stage)
        elif rec.status == RunStatus.STOPPING:
            await self._finish(live, RunStatus.STOPPED, rec.error)
        elif ProcessName.TRAINER not in live.children:
            await self._on_exit(live, ProcessName.TRAINER, ADOPTED_EXIT)
        else:
            log.info("run %s re-adopted (%s alive)", rec.run_id, ", ".join(live.children))
            self._tg.start_soon(self._run_adopted, live)
            return
        self._live.pop(rec.run_id, None)

    def _adopt(self, rec: RunRecord) -> Live:
        """Supervise the recorded processes that are still the same processes (pid + start time)."""
        live = Live(rec=rec)
        for name, proc in rec.processes.items():
            if proc.exit_code is not None:
                continue
            child = processes.adopt(name, proc.pid, proc.create_time, Path(proc.log_path))
            if child is not None:
                live.children[ProcessName(name)] = child
            else:
                self._mark_exit(rec, name, None)
        self._live[rec.run_id] = live
        return live

    async def _run_adopted(self, live: Live) -> None:
        try:
            with live.scope:
                await self._supervise(live)
        except Exception as exc:
            await self._fail_unexpectedly(live, exc)
        finally:
            live.done.set()
            if not live.rec.active:
                self._live.pop(live.rec.run_id, None)

    def get(self, run_id: str) -> RunRecord:
        live = self._live.get(run_id)
        if live is not None:
            return live.rec
        rec = self.store.get(run_id)
        if rec is None:
            raise unknown_run(run_id, self.store.ids())
        return rec

    def list(self, status: str | None = None) -> list[RunRecord]:
        if status is not None and status not in list(RunStatus):
            raise RunError(f"unknown status {status!r}; use one of {sorted(s.value for s in RunStatus)}")
        live = {run_id: lv.rec for run_id, lv in list(self._live.items())}  # tool threads read it too
        records = [live.get(r.run_id, r) for r in self.store.list()]
        return [r for r in records if status in (None, r.status)]

    def children(self, run_id: str) -> dict[str, Child]:
        live = self._live.get(run_id)
        return {str(name): child for name, child in live.children.items()} if live else {}

    def supervised(self) -> builtins.list[RunRecord]:
        """The runs this server lifetime supervises now (their files may still grow)."""
        return [live.rec for live in list(self._live.values())]

    def _save(self, rec: RunRecord) -> None:
        self.store.save(rec)
        self.events.run_changed(rec)
