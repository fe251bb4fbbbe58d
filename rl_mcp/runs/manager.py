"""The run lifecycle: start in stages, supervise, stop, re-adopt after a restart.

One `RunManager` per server process. Its tasks run in the anyio task group that `main()` holds
(outside the MCP SDK's per-connection lifespan), so a client disconnecting never touches a run.
Children run in their own sessions and keep going when the server exits, unless asked otherwise.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import yaml
from anyio.abc import TaskGroup

from rl_mcp.logs import tail_lines
from rl_mcp.runs import processes
from rl_mcp.runs.ports import PortReservations
from rl_mcp.runs.processes import Child, StageError
from rl_mcp.runs.store import ALL_STATUSES, ProcessRecord, RunRecord, RunStore, new_run_id
from rl_mcp.settings import Settings, without_secrets

log = logging.getLogger(__name__)

PROCESS_NAMES = ("api", "trainer", "env")
STOP_ORDER = ("env", "trainer", "api")
# The secrets each process of a run may see (by environment variable); the rest are withheld.
CHILD_SECRETS = {"api": (), "trainer": ("TINKER_API_KEY", "WANDB_API_KEY"), "env": ("WANDB_API_KEY",)}
FAILURE_TAIL_LINES = 20
SUPERVISE_INTERVAL_S = 0.5  # a child's exit is noticed within this (the contract says 2 s)

Progress = Callable[[float, float, str], Awaitable[None]]


class RunError(ValueError):
    """A request about runs that cannot be served; the message says what to do instead."""


@dataclass(frozen=True)
class StageTimeouts:
    """Upper bounds per start stage; readiness is polled, so a fast start is never slowed."""

    api_s: float = 60.0
    trainer_s: float = 600.0  # model load (local) or first contact with Tinker
    env_s: float = 300.0  # the environment's setup (datasets, tokenizer) before it registers


@dataclass
class RunPlan:
    """What a start needs from the session: the environment and how to write the run config.

    `write_config(run_dir, api_port, inference_port, run_name)` writes `run_dir/config.yaml`
    (profile locked values + the agent's edits + these ports) and returns its path.
    """

    environment: str
    env_file: Path
    write_config: Callable[[Path, int, int, str], Path]
    run_name: str | None = None  # the selection's wandb_name; the run id when another run has it


class RunEvents:
    """Where the manager reports changes; the MCP layer overrides these to push notifications."""

    def resource_changed(self, uri: str) -> None:
        """`uri`'s content changed (called often; the receiver throttles)."""

    def runs_list_changed(self) -> None:
        """A run appeared: its resources exist from now on."""


@dataclass
class _Live:
    """A run this server lifetime supervises."""

    rec: RunRecord
    children: dict[str, Child] = field(default_factory=dict)
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    done: anyio.Event = field(default_factory=anyio.Event)
    settled: anyio.Event = field(default_factory=anyio.Event)  # running, or final
    stop_requested: bool = False
    ports_reserved: list[int] = field(default_factory=list)


class RunManager:
    def __init__(
        self,
        settings: Settings,
        *,
        store: RunStore | None = None,
        events: RunEvents | None = None,
        timeouts: StageTimeouts = StageTimeouts(),
        stop_grace_s: float = 30.0,
    ) -> None:
        self.settings = settings
        self.store = store or RunStore(settings.home / "runs.sqlite")
        self.events = events or RunEvents()
        self.timeouts = timeouts
        self.stop_grace_s = stop_grace_s
        self.ports = PortReservations(self.store.ports_in_use)
        self._live: dict[str, _Live] = {}
        self._tg: TaskGroup | None = None
        self._http = httpx.AsyncClient(timeout=2.0, trust_env=False)

    # ------------------------------------------------------------------ lifetime

    async def attach(self, tg: TaskGroup) -> None:
        """Take the server's task group and re-adopt the runs an earlier lifetime left behind."""
        self._tg = tg
        for rec in self.store.list():
            if rec.active:
                await self._recover(rec)

    async def shutdown(self, *, stop_runs: bool) -> None:
        """End supervision; running runs keep going unless `stop_runs` (--stop-runs-on-exit).

        A run still starting cannot finish its start without this server: it is stopped.
        """
        lives = list(self._live.values())
        with anyio.CancelScope(shield=True):
            for live in lives:
                if stop_runs or live.rec.status == "starting":
                    await self.stop(live.rec.run_id)
        for live in lives:
            live.scope.cancel()
        await self._http.aclose()

    # ------------------------------------------------------------------ start

    def preflight(self, plan: RunPlan) -> None:
        profile = self.settings.profile
        if not plan.env_file.is_file():
            raise RunError(
                f"environment {plan.environment!r} file {plan.env_file} is missing; "
                "call rl_list_environments and rl_select_environment again"
            )
        if profile.backend == "tinker":
            key = self.settings.environ.get("TINKER_API_KEY", "")
            if not key:
                raise RunError(
                    "profile 'tinker' needs TINKER_API_KEY in the server's environment "
                    "(get one at https://tinker-console.thinkingmachines.ai); or start the server "
                    "with --profile local to train on this machine"
                )
            if not key.startswith("tml-"):
                raise RunError("TINKER_API_KEY is malformed: Tinker keys start with 'tml-'")
        missing = [k for k in profile.requires_env if not self.settings.environ.get(k)]
        if missing:
            raise RunError(f"profile {profile.name!r} needs {', '.join(missing)} set in the server's environment")

    async def start(self, plan: RunPlan, *, progress: Progress | None = None, wait: bool = False) -> RunRecord:
        """Pre-flight, write the config, record the run, and start it in the background.

        Returns at once (status `starting`) unless `wait`, then when it is running or has failed.
        """
        if self._tg is None:
            raise RuntimeError("RunManager.attach() was not called")
        report = progress or _no_progress
        total = 6.0 if wait else 3.0
        self.preflight(plan)
        await report(1, total, "pre-flight passed")
        api_port, inference_port = self.ports.reserve(2)
        try:
            run_id = new_run_id(plan.environment)
            run_dir = self.settings.runs_dir / run_id
            (run_dir / "logs").mkdir(parents=True, exist_ok=True)
            taken = plan.run_name is None or any(r.run_name == plan.run_name for r in self.store.list())
            config_path = plan.write_config(run_dir, api_port, inference_port, run_id if taken else plan.run_name)
            run_name, total_steps = _read_run_identity(config_path, run_id)
            await report(2, total, f"config written: {config_path}")
            rec = RunRecord(
                run_id=run_id, environment=plan.environment, profile=self.settings.profile.name,
                status="starting", stage="api", run_dir=str(run_dir), config_path=str(config_path),
                run_name=run_name, total_steps=total_steps, api_port=api_port,
                inference_port=inference_port, created_at=time.time(),
            )
            self.store.insert(rec)
        except BaseException:
            self.ports.release([api_port, inference_port])
            raise
        live = _Live(rec=rec, ports_reserved=[api_port, inference_port])
        self._live[run_id] = live
        self._tg.start_soon(self._run, live, plan.env_file)
        self.events.runs_list_changed()
        await report(3, total, f"run {run_id} recorded; starting run-api")
        if wait:
            stages = {"trainer": 4.0, "env": 5.0}
            seen: set[str] = set()
            while not live.settled.is_set():
                stage = live.rec.stage
                if stage in stages and stage not in seen:
                    seen.add(stage)
                    await report(stages[stage], total, f"{stage} starting")
                with anyio.move_on_after(0.2):
                    await live.settled.wait()
            await report(total, total, f"run {run_id} is {live.rec.status}")
        return live.rec

    async def _run(self, live: _Live, env_file: Path) -> None:
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
            live.settled.set()
            live.done.set()
            if not rec.active:
                self._live.pop(rec.run_id, None)

    async def _start_stages(self, live: _Live, env_file: Path) -> None:
        rec = live.rec
        python = self.settings.python
        config = rec.config_path
        root = self.settings.project_root
        launcher = root / "tinker-atropos" / "launch_training.py"
        trainer_argv = (
            [python, str(launcher), "--config", config]
            if launcher.is_file()
            else [python, "-m", "tinker_atropos.launch", "--config", config]
        )
        run_api = str(Path(python).with_name("run-api"))
        stages: list[tuple[str, list[str], Callable[[], Awaitable[bool]], float]] = [
            ("api", [run_api, "--host", "127.0.0.1", "--port", str(rec.api_port)], self._api_ready(rec), self.timeouts.api_s),
            ("trainer", trainer_argv, self._trainer_ready(rec), self.timeouts.trainer_s),
            ("env", [python, str(env_file), "serve", "--config", config], self._env_ready(rec), self.timeouts.env_s),
        ]
        for name, argv, ready, timeout_s in stages:
            rec.stage = name
            child = self._spawn(live, name, argv)
            self._save(rec)
            await processes.wait_ready(name, child, self._guarded(live, name, ready), timeout_s=timeout_s)
            if name == "api":
                self._release(live, rec.api_port)
            elif name == "trainer":
                self._release(live, rec.inference_port)
        rec.status, rec.stage, rec.running_at = "running", None, time.time()
        self._save(rec)
        live.settled.set()
        log.info("run %s running", rec.run_id)

    def _guarded(self, live: _Live, stage: str, ready: Callable[[], Awaitable[bool]]) -> Callable[[], Awaitable[bool]]:
        """Readiness of one stage that also fails when an earlier stage's process has died."""

        async def check() -> bool:
            for name, child in live.children.items():
                code = child.poll()
                if name != stage and code is not None:
                    raise StageError(stage, f"{name} exited with code {code} while {stage} was starting", code, name)
            return await ready()

        return check

    def _spawn(self, live: _Live, name: str, argv: list[str]) -> Child:
        rec = live.rec
        env = {**without_secrets(self.settings.environ, allow=CHILD_SECRETS[name]), "PYTHONUNBUFFERED": "1"}
        child = processes.spawn(name, argv, log_path=rec.log_path(name), env=env, cwd=Path(rec.run_dir))
        live.children[name] = child
        rec.processes[name] = ProcessRecord(
            pid=child.pid, create_time=child.create_time, argv=argv,
            log_path=str(child.log_path), started_at=time.time(),
        )
        return child

    def _release(self, live: _Live, port: int) -> None:
        if port in live.ports_reserved:
            live.ports_reserved.remove(port)
            self.ports.release([port])

    # readiness probes (docs/run-files.md)

    def _api_ready(self, rec: RunRecord) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return await self._get_ok(f"http://127.0.0.1:{rec.api_port}/status")

        return check

    def _trainer_ready(self, rec: RunRecord) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            try:
                resp = await self._http.get(f"http://127.0.0.1:{rec.inference_port}/health")
                return resp.status_code == 200 and resp.json().get("status") == "ok"
            except (httpx.HTTPError, ValueError, AttributeError):
                return False

        return check

    def _env_ready(self, rec: RunRecord) -> Callable[[], Awaitable[bool]]:
        api_log = rec.log_path("api")

        async def check() -> bool:
            # /status-env answers 500 with a traceback in api.log until an env registered: ask it
            # only once the access log shows a registration attempt.
            if not any("/register-env" in line for line in tail_lines(api_log, 50)):
                return False
            try:
                resp = await self._http.request(
                    "GET", f"http://127.0.0.1:{rec.api_port}/status-env", json={"env_id": 0}
                )
                return resp.status_code == 200
            except httpx.HTTPError:
                return False

        return check

    async def _get_ok(self, url: str) -> bool:
        try:
            return (await self._http.get(url)).status_code == 200
        except httpx.HTTPError:
            return False

    # ------------------------------------------------------------------ supervision

    async def _supervise(self, live: _Live) -> None:
        """Watch the children until the run ends; exits are noticed within SUPERVISE_INTERVAL_S."""
        rec = live.rec
        while rec.active:
            for name in PROCESS_NAMES:
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
            await anyio.sleep(SUPERVISE_INTERVAL_S)

    async def _on_exit(self, live: _Live, name: str, code: int) -> None:
        rec = live.rec
        result = _read_result(rec)
        if name == "trainer":
            outcome = (result or {}).get("status")
            if code == 0 or (code == -1 and outcome in ("completed", "stopped")):
                # exit 0 = total_steps done, or SIGTERM from outside this server (then "stopped")
                final = "stopped" if outcome == "stopped" else "completed"
                await self._finish(live, final, None)
            elif code == -1 and outcome is None:
                await self._finish(
                    live, "lost", "the trainer is gone and wrote no result.json (not a child of this server, "
                    "so its exit code is unknown)", tail_of="trainer",
                )
            else:
                detail = (result or {}).get("error") or _exit_meaning(code)
                how = f"exited with code {code}" if code != -1 else "failed (it was not a child of this server)"
                await self._finish(live, "failed", f"trainer {how}: {detail}", tail_of="trainer")
        elif name == "env" and code in (0, -1):
            log.info("run %s: environment finished its work (exit %s)", rec.run_id, code)
            self._save(rec)
        else:
            what = {"api": "run-api", "env": "the environment"}.get(name, name)
            await self._finish(live, "failed", f"{what} exited with code {code}", tail_of=name)

    def _mark_exit(self, rec: RunRecord, name: str, code: int | None) -> None:
        proc = rec.processes[name]
        proc.exit_code = code if code is not None else -1
        proc.ended_at = time.time()

    async def _finish(self, live: _Live, status: str, error: str | None, *, tail_of: str | None = None) -> None:
        """Stop what is left (env -> trainer -> API) and record the final state."""
        rec = live.rec
        rec.status = "stopping"
        self._save(rec)
        with anyio.CancelScope(shield=True):
            await self._stop_children(live)
        rec.status, rec.error, rec.ended_at = status, error, time.time()
        if tail_of is not None:
            rec.log_tail = tail_lines(rec.log_path(tail_of), FAILURE_TAIL_LINES)
        self._save(rec)
        live.settled.set()
        log.info("run %s %s%s", rec.run_id, status, f": {error}" if error else "")

    async def _fail(self, live: _Live, err: StageError) -> None:
        rec = live.rec
        rec.stage = err.stage
        if err.exit_code is not None and err.process in rec.processes:
            self._mark_exit(rec, err.process, err.exit_code)
        await self._finish(live, "failed", f"stage {err.stage} failed: {err}", tail_of=err.process)

    async def _fail_unexpectedly(self, live: _Live, exc: Exception) -> None:
        log.exception("run %s: unexpected error", live.rec.run_id)
        try:
            await self._finish(live, "failed", f"{type(exc).__name__}: {exc}")
        except Exception:  # e.g. the registry is unwritable too: the processes are stopped, say so in the log
            log.exception("run %s: could not record the failure", live.rec.run_id)
            live.rec.status = "failed"
            live.settled.set()

    async def _stop_children(self, live: _Live) -> None:
        for name in STOP_ORDER:
            child = live.children.get(name)
            if child is None:
                continue
            grace = self.stop_grace_s if name == "trainer" else min(self.stop_grace_s, 10.0)
            code = await processes.stop(child, grace_s=grace)
            if live.rec.processes[name].exit_code is None:
                self._mark_exit(live.rec, name, code)

    # ------------------------------------------------------------------ stop / recover

    async def stop(self, run_id: str) -> RunRecord:
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
                await self._finish(live, "stopped", None)
        self._live.pop(run_id, None)
        return live.rec

    async def _recover(self, rec: RunRecord) -> None:
        """A run an earlier server lifetime left active: adopt it, or settle it from its files."""
        live = self._adopt(rec)
        assert self._tg is not None
        if rec.status == "starting":
            live.settled.set()
            await self._finish(live, "failed", f"the server exited while stage {rec.stage} was starting; start the run again", tail_of=rec.stage)
            self._live.pop(rec.run_id, None)
            return
        if rec.status == "stopping":
            await self._finish(live, "stopped", rec.error)
            self._live.pop(rec.run_id, None)
            return
        live.settled.set()
        log.info("run %s re-adopted (%s alive)", rec.run_id, ", ".join(live.children) or "nothing")
        trainer = live.children.get("trainer")
        if trainer is None:
            await self._on_exit(live, "trainer", -1)
            self._live.pop(rec.run_id, None)
            return
        self._tg.start_soon(self._run_adopted, live)

    def _adopt(self, rec: RunRecord) -> _Live:
        """Supervise the recorded processes that are still the same processes (pid + start time)."""
        live = _Live(rec=rec)
        for name, proc in rec.processes.items():
            if proc.exit_code is not None:
                continue
            child = processes.adopt(name, proc.pid, proc.create_time, Path(proc.log_path))
            if child is not None:
                live.children[name] = child
            else:
                self._mark_exit(rec, name, None)
        self._live[rec.run_id] = live
        return live

    async def _run_adopted(self, live: _Live) -> None:
        try:
            with live.scope:
                await self._supervise(live)
        except Exception as exc:
            await self._fail_unexpectedly(live, exc)
        finally:
            live.done.set()
            if not live.rec.active:
                self._live.pop(live.rec.run_id, None)

    # ------------------------------------------------------------------ queries

    def get(self, run_id: str) -> RunRecord:
        live = self._live.get(run_id)
        if live is not None:
            return live.rec
        rec = self.store.get(run_id)
        if rec is None:
            known = self.store.ids()
            hint = f"known runs: {', '.join(known[:20])}" if known else "no runs yet: start one with rl_start_training"
            raise RunError(f"unknown run id {run_id!r}; {hint}")
        return rec

    def list(self, status: str | None = None) -> list[RunRecord]:
        if status is not None and status not in ALL_STATUSES:
            raise RunError(f"unknown status {status!r}; use one of {sorted(ALL_STATUSES)}")
        live = {run_id: lv.rec for run_id, lv in list(self._live.items())}  # tool threads read it too
        return [live.get(r.run_id, r) for r in self.store.list() if status in (None, live.get(r.run_id, r).status)]

    def children(self, run_id: str) -> dict[str, Child]:
        live = self._live.get(run_id)
        return dict(live.children) if live else {}

    def watched_files(self) -> dict[str, list[Path]]:
        """Resource URI -> the files behind it, for every run supervised now."""
        out: dict[str, list[Path]] = {}
        for run_id, live in list(self._live.items()):
            out.update(_run_files(live.rec))
        return out

    def _save(self, rec: RunRecord) -> None:
        self.store.save(rec)
        self.events.resource_changed(f"rl://runs/{rec.run_id}")
        self.events.resource_changed("rl://runs")
        if not rec.active:  # the last lines may land between two ticks of the watcher
            for uri in _run_files(rec):
                self.events.resource_changed(uri)


def _run_files(rec: RunRecord) -> dict[str, list[Path]]:
    base = f"rl://runs/{rec.run_id}"
    run_dir = Path(rec.run_dir)
    out = {f"{base}/metrics": [run_dir / "metrics.jsonl", run_dir / "eval.jsonl"]}
    out.update({f"{base}/logs/{name}": [rec.log_path(name)] for name in PROCESS_NAMES})
    return out


async def _no_progress(progress: float, total: float, message: str) -> None:
    return None


def _read_run_identity(config_path: Path, fallback: str) -> tuple[str, int]:
    """run_name and total_steps as the trainer will read them from the written config."""
    data: dict[str, Any] = yaml.safe_load(config_path.read_text()) or {}
    tinker = data.get("tinker") or {}
    env = data.get("env") or {}
    run_name = str(tinker.get("run_name") or env.get("wandb_name") or fallback)
    total_steps = int(tinker.get("total_steps") or env.get("total_steps") or 0)
    return run_name, total_steps


def _read_result(rec: RunRecord) -> dict[str, Any] | None:
    from rl_mcp.metrics import read_result

    return read_result(Path(rec.run_dir))


_EXIT_MEANINGS = {
    1: "error during training (traceback in the trainer log)",
    2: "the config file is missing or invalid",
    3: "backend unavailable (TINKER_API_KEY missing/malformed, Tinker unreachable, or model not loadable)",
    4: "run-api unreachable or rejected the registration",
    5: "the inference server could not bind its port",
    -9: "killed (SIGKILL)",
    -15: "terminated (SIGTERM)",
}


def _exit_meaning(code: int) -> str:
    return _EXIT_MEANINGS.get(code, "see the trainer log")


def status_min_interval(settings: Settings) -> float:
    """RL_MCP_STATUS_MIN_INTERVAL seconds between two status checks of one run (default 1800)."""
    raw = settings.environ.get("RL_MCP_STATUS_MIN_INTERVAL", os.environ.get("RL_MCP_STATUS_MIN_INTERVAL", "1800"))
    try:
        value = float(raw)
    except ValueError as exc:
        raise RunError(f"RL_MCP_STATUS_MIN_INTERVAL must be seconds, got {raw!r}") from exc
    return max(value, 0.0)
