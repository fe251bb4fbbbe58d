"""The start of a run in stages: what each process runs, and when it counts as ready.

Readiness order (docs/run-files.md): run-api, then the trainer (which registers with run-api
and serves inference), then the environment (which registers with run-api). All three are
spawned at once (RunManager._start_stages); readiness is polled in that order, never slept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from rl_mcp.logs import tail_lines
from rl_mcp.processes import Child, StageError, health_ok
from rl_mcp.runs.store import RunRecord
from rl_mcp.runs.vocab import Stage
from rl_mcp.settings import Settings
from tinker_atropos.run_files import ProcessName

Ready = Callable[[], Awaitable[bool]]
# What starts when a stage's turn comes: everything with run-api. The trainer's imports and model
# load and the environment's atroposlib import overlap run-api's start; the order still holds, as
# the trainer retries its registration until run-api answers, and run-api holds the environment's
# registration until the trainer has asked for a batch.
SPAWN_WITH = {Stage.API: (Stage.API, Stage.TRAINER, Stage.ENV)}


@dataclass(frozen=True)
class StageTimeouts:
    """Upper bounds per start stage; readiness is polled, so a fast start is never slowed."""

    api_s: float = 60.0
    trainer_s: float = 600.0  # model load (local) or first contact with Tinker
    env_s: float = 300.0  # the environment's setup (datasets, tokenizer) before it registers

    def of(self, stage: Stage) -> float:
        return {Stage.API: self.api_s, Stage.TRAINER: self.trainer_s, Stage.ENV: self.env_s}[stage]


@dataclass(frozen=True)
class StagePlan:
    """One stage: the command of its process and its readiness check."""

    stage: Stage
    argv: list[str]
    ready: Ready


def stage_plans(settings: Settings, rec: RunRecord, env_file: Path, http: httpx.AsyncClient) -> list[StagePlan]:
    """The three stages of `rec`, in start order."""
    python, config = settings.python, rec.config_path
    launcher = settings.project_root / "tinker-atropos" / "launch_training.py"
    trainer_argv = (
        [python, str(launcher), "--config", config]
        if launcher.is_file()
        else [python, "-m", "tinker_atropos.launch", "--config", config]
    )
    run_api = str(Path(python).with_name("run-api"))
    api_url = f"http://127.0.0.1:{rec.api_port}"
    return [
        StagePlan(
            Stage.API,
            [run_api, "--host", "127.0.0.1", "--port", str(rec.api_port)],
            lambda: health_ok(http, f"{api_url}/status"),
        ),
        StagePlan(
            Stage.TRAINER,
            trainer_argv,
            lambda: health_ok(http, f"http://127.0.0.1:{rec.inference_port}/health"),
        ),
        StagePlan(
            Stage.ENV,
            [python, str(env_file), "serve", "--config", config],
            _env_registered(http, api_url, rec.log_path("api")),
        ),
    ]


def _env_registered(http: httpx.AsyncClient, api_url: str, api_log: Path) -> Ready:
    async def check() -> bool:
        # /status-env answers 500 with a traceback in api.log until an env registered: ask it
        # only once the access log shows a registration attempt.
        if not any("/register-env" in line for line in tail_lines(api_log, 50)):
            return False
        try:
            resp = await http.request("GET", f"{api_url}/status-env", json={"env_id": 0})
        except httpx.HTTPError:
            return False
        return resp.status_code == 200

    return check


def guarded(children: Mapping[ProcessName, Child], stage: Stage, ready: Ready) -> Ready:
    """Readiness of one stage that also fails when an earlier stage's process has died."""

    order = list(Stage)

    async def check() -> bool:
        for name, child in children.items():
            code = child.poll()
            if name != ProcessName(stage) and code is not None:
                own = Stage(name)  # each process has the stage of its name
                if order.index(own) > order.index(stage):  # started early, died before its turn
                    raise StageError(own, f"{name} exited with code {code} before it was ready", code, name)
                raise StageError(stage, f"{name} exited with code {code} while {stage} was starting", code, name)
        return await ready()

    return check
