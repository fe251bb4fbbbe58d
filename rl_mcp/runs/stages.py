"""The start of a run in stages: what each process runs, and when it counts as ready.

Readiness order (docs/run-files.md): run-api, then the trainer (which registers with run-api
and serves inference), then the environment (which registers with run-api). All three are
spawned at once (RunManager._start_stages); readiness is polled in that order, never slept.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from rl_mcp import warm_start
from rl_mcp.engines.service import EngineService
from rl_mcp.environments.packages.install import runtime_of_file
from rl_mcp.formats import process_file
from rl_mcp.logs import tail_lines
from rl_mcp.model_build import ModelBuildError, build_models, models_to_build
from rl_mcp.processes import Child, StageError, health_ok
from rl_mcp.runs.config_file import read_run_config
from rl_mcp.runs.sft_stage import (
    run_sft_stage,
    sft_command,
    sft_env,
    sft_pending,
    sft_section,
    with_teacher_key,
    write_sft_only_result,
)
from rl_mcp.runs.store import RunRecord
from rl_mcp.runs.vocab import Stage
from rl_mcp.settings import Settings, without_secrets
from rl_mcp.tmpdirs import run_tmpdir
from tinker_atropos.run_files import ENV_HEALTH_VAR, MODEL_BUILD, ProcessName

Ready = Callable[[], Awaitable[bool]]

# The secrets each process of a run may see (by environment variable); the rest are withheld.
CHILD_SECRETS = {
    ProcessName.API: (),
    ProcessName.TRAINER: ("TINKER_API_KEY", "TINKER_ENGINE_API_KEY", "WANDB_API_KEY"),
    ProcessName.ENV: ("WANDB_API_KEY",),
}


def child_env(settings: Settings, rec: RunRecord, name: ProcessName) -> dict[str, str]:
    """The environment of one process of a run: the server's, less the secrets it has no use for, and
    the run's own TMPDIR (removed when the run ends); the environment's also says where to keep its
    rollouts' health (env_health.json)."""
    own = {"PYTHONUNBUFFERED": "1", "TMPDIR": str(run_tmpdir(rec.files))}
    if name != ProcessName.ENV:
        return {**without_secrets(settings.environ, allow=CHILD_SECRETS[name]), **own}
    env = without_secrets(settings.environ, allow=(*CHILD_SECRETS[name], *settings.env_process_vars))
    return {**env, **own, ENV_HEALTH_VAR: str(rec.files.env_health)}


@dataclass(frozen=True)
class StageTimeouts:
    """Upper bounds per start stage; readiness is polled, so a fast start is never slowed."""

    model_s: float = 600.0  # a first run builds its offline model (SmolLM2: dequantized from its GGUF)
    engine_s: float = 900.0  # SkyRL's engine: imports, the model, its first XLA compiles
    sft_s: float = 6 * 3600.0  # the supervised stage: its budget is the agent's (steps, epochs)
    api_s: float = 60.0
    trainer_s: float = 600.0  # model load (local) or first contact with Tinker
    env_s: float = 300.0  # the environment's setup (datasets, tokenizer) before it registers

    def of(self, stage: Stage) -> float:
        limits = {Stage.MODEL: self.model_s, Stage.ENGINE: self.engine_s, Stage.SFT: self.sft_s, Stage.API: self.api_s}
        return {**limits, Stage.TRAINER: self.trainer_s, Stage.ENV: self.env_s}[stage]


@dataclass(frozen=True)
class StagePlan:
    """One stage: the command of its process and its readiness check."""

    stage: Stage
    argv: list[str]
    ready: Ready


def stage_plans(settings: Settings, rec: RunRecord, env_file: Path, http: httpx.AsyncClient) -> list[StagePlan]:
    """The three stages of `rec`, in start order."""
    python, config = settings.python, rec.config_path
    trainer_argv = [python, *settings.trainer_entry, "--config", config]
    # atroposlib's `run-api` script as a module: forked from the warm template (fastapi, uvicorn and
    # atroposlib imported) where the script would start cold
    run_api = [python, "-m", "atroposlib.cli.run_api"]
    # an Atropos environment folder runs on its own venv (installed before the run started)
    env_python = runtime_of_file(settings.home, env_file, None, settings.environ, python).python
    api_url = f"http://127.0.0.1:{rec.api_port}"
    return [
        StagePlan(
            Stage.API,
            [*run_api, "--host", "127.0.0.1", "--port", str(rec.api_port)],
            lambda: health_ok(http, f"{api_url}/status"),
        ),
        StagePlan(
            Stage.TRAINER,
            trainer_argv,
            lambda: health_ok(http, f"http://127.0.0.1:{rec.inference_port}/health"),
        ),
        StagePlan(
            Stage.ENV,
            [
                env_python,
                "-m",
                "rl_mcp.children.env_process",
                str(process_file(env_file)),
                "serve",
                "--config",
                config,
            ],
            _env_registered(http, api_url, rec.log_path("api")),
        ),
    ]


def preparations(
    settings: Settings, rec: RunRecord, env_file: Path, engine: EngineService | None, timeouts: StageTimeouts
) -> list[tuple[Stage, Callable[[], Awaitable[object]]]]:
    """What comes before run-api, in order: the model's build when it is missing (stage `model`),
    then the self-hosted engine when the profile trains on one (stage `engine`), then the supervised
    stage when the environment's config asks for one not done yet (stage `sft`). The warm template its
    children fork from is started first, where none is up (rl_mcp/warm_start/), and waited for before
    the supervised stage and run-api: each process forked from it spends ~0.2 CPU s, where started cold
    beside it each spends ~4 importing what it imports anyway (a run straight after a server's start)."""
    warm_start.prepare(settings.python, settings.environ)

    def warm_template() -> Awaitable[bool]:
        return warm_start.wait_ready(settings.python, settings.environ, warm_start.READY_WAIT_S)

    steps: list[tuple[Stage, Callable[[], Awaitable[object]]]] = []
    if models_to_build(_config_of(rec)):
        steps.append((Stage.MODEL, lambda: build_run_models(settings, rec, timeouts.model_s)))
    if engine is not None:
        steps.append((Stage.ENGINE, engine.ensure_running))
    if sft_pending(_config_of(rec), rec.files):
        python = runtime_of_file(settings.home, env_file, None, settings.environ, settings.python).python
        argv = sft_command(python, rec.config_path, process_file(env_file))
        # it trains: the trainer's secrets, and its teacher's key where it names one; no others
        env = with_teacher_key(child_env(settings, rec, ProcessName.TRAINER), _config_of(rec), settings.environ)
        steps.append((Stage.SFT, warm_template))  # the stage's process forks from it too
        steps.append((Stage.SFT, lambda: run_sft_stage(argv, rec.files, sft_env(env), timeouts.sft_s)))
    steps.append((Stage.API, warm_template))
    return steps


def ended_by_sft(rec: RunRecord) -> bool:
    """Whether the run ends with its supervised stage (`then: stop`); its result.json is then written."""
    section = sft_section(_config_of(rec))
    if section is None or section.get("then") != "stop":
        return False
    write_sft_only_result(rec.files, str(_config_of(rec)["trainer"].get("backend", "local")))
    return True


def engine_problem(engine: EngineService | None) -> str | None:
    """Why a run's engine is gone (it died while the run trained on it), else None."""
    return None if engine is None else engine.died()


async def build_run_models(settings: Settings, rec: RunRecord, timeout_s: float) -> None:
    """Stage `model`: build the offline models the run's config names; StageError when one fails."""
    env, log = child_env(settings, rec, ProcessName.API), rec.log_path(MODEL_BUILD)  # a build needs no secret
    try:
        await build_models(_config_of(rec), python=settings.python, env=env, log=log, timeout_s=timeout_s)
    except ModelBuildError as exc:
        raise StageError(Stage.MODEL, str(exc), exc.exit_code, MODEL_BUILD) from exc


def _config_of(rec: RunRecord) -> dict[str, Any]:
    return read_run_config(rec.config_path)


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
