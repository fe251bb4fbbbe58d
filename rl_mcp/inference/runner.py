"""rl_test_inference: run an environment's `process` mode against real inference, per model.

One `process` child per model, each with a fresh output folder (atroposlib would write
`x_1.jsonl` next to an old `x.jsonl`), W&B off unless WANDB_API_KEY is set, a per-model
timeout, a few models at a time. Scores come from the JSONL atroposlib writes; what the
environment does meanwhile (exceptions, discarded groups, its requests) from env_health.json.
An environment that only raises or only discards is stopped early and said so. A cancelled call
stops its children and removes its folder.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx

from rl_mcp import warm_start
from rl_mcp.environments.missing_module import MODULE_TAIL_LINES, explained
from rl_mcp.formats import process_file
from rl_mcp.inference.progress import Progress, ProgressFn, waiting_line
from rl_mcp.inference.scores import ScoreSummary, read_groups, summarize
from rl_mcp.inference.target import InferenceRequest, Target, child_env, model_slug, process_config
from rl_mcp.logs import last_error_line, marked_lines, tail_lines
from rl_mcp.model_build import ModelBuildError, build_models
from rl_mcp.processes import StageError, health_ok, probe_client, supervised
from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from rl_mcp.runs.env_health import EnvHealth, discarding, raising, read_health
from rl_mcp.runs.ports import PortReservations
from rl_mcp.runs.reply_length import Limit, at_cap
from rl_mcp.session.run_config import write_run_config
from tinker_atropos.run_files import ENV_HEALTH_VAR, WARNING_MARK, InferenceTestFiles

_PROGRESS = re.compile(r"Successfully processed group (\d+)/(\d+)")
LOG_TAIL_LINES = 25
MAX_PARALLEL = 3
RAISING_STOP_S = 20.0  # an environment that raises and scores nothing for this long is stopped

LiveTokens = Callable[[], Awaitable[int | None]]  # tokens the local server has generated so far


@dataclass
class ModelOutcome:
    model: str
    status: Literal["ok", "failed", "timeout", "discarded"]
    seconds: float
    output_dir: Path
    log: Path
    jsonl: Path | None = None
    html: Path | None = None
    server_log: Path | None = None
    scores: ScoreSummary | None = None
    error: str | None = None
    log_tail: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    health: EnvHealth | None = None  # what the environment process reported last
    at_cap: Limit | None = None  # what cut the replies that ran to their cap


async def run_inference_test(
    req: InferenceRequest,
    target: Target,
    *,
    environ: Mapping[str, str],
    pass_env: Sequence[str] = (),
    python: str = sys.executable,
    ports: PortReservations | None = None,
    progress: ProgressFn | None = None,
    max_parallel: int = MAX_PARALLEL,
) -> list[ModelOutcome]:
    """Test every model of `target`; returns one outcome per model, in the order given.

    `req.timeout_s` bounds the whole call: a model still running (or not yet started) when it is
    spent is stopped and reported as a timeout."""
    deadline = time.monotonic() + req.timeout_s
    ports = ports or PortReservations()
    warm_start.prepare(python, environ)  # its children fork from it once it is up (rl_mcp/warm_start/)
    tracker = Progress(req.num_steps, len(target.models), progress)
    limiter = anyio.CapacityLimiter(1 if target.kind == "local" else max_parallel)  # local: one model in RAM
    outcomes: dict[str, ModelOutcome] = {}

    async def one(model: str) -> None:
        async with limiter:
            env = child_env(environ, target, pass_env)
            outcomes[model] = await _test_model(req, target, model, env, environ, python, ports, tracker, deadline)

    async with anyio.create_task_group() as tg:
        for model in target.models:
            tg.start_soon(one, model)
    return [outcomes[m] for m in target.models]


async def _test_model(
    req: InferenceRequest,
    target: Target,
    model: str,
    env: dict[str, str],
    environ: Mapping[str, str],
    python: str,
    ports: PortReservations,
    tracker: Progress,
    deadline: float,
) -> ModelOutcome:
    started = time.monotonic()
    files = InferenceTestFiles(req.out_dir / model_slug(model))
    files.folder.mkdir(parents=True, exist_ok=True)
    out = ModelOutcome(model=model, status="failed", seconds=0.0, output_dir=files.folder, log=files.process_log)
    wandb = bool(environ.get("WANDB_API_KEY"))
    try:
        if target.kind != "local":
            config = process_config(req, target, model, run_dir=files.folder, inference_port=None, use_wandb=wandb)
            write_run_config(files.config, config)
            if await _models_built(config, out, env, python, out.log, deadline):
                await _run_process(req, model, files, out, env, python, tracker, deadline)
        else:
            await _test_local_model(req, target, model, files, out, env, wandb, python, ports, tracker, deadline)
    finally:
        out.seconds = round(time.monotonic() - started, 2)
    return out


async def _test_local_model(
    req: InferenceRequest,
    target: Target,
    model: str,
    files: InferenceTestFiles,
    out: ModelOutcome,
    env: dict[str, str],
    wandb: bool,
    python: str,
    ports: PortReservations,
    tracker: Progress,
    deadline: float,
) -> None:
    """The same test against a local inference server started for it on a reserved port."""
    port = ports.reserve(1)[0]
    try:
        config = process_config(req, target, model, run_dir=files.folder, inference_port=port, use_wandb=wandb)
        write_run_config(files.config, config)
        out.server_log = files.server_log
        weights = target.local_weights(model)
        if not await _models_built(config, out, env, python, files.server_log, deadline):
            return
        argv = [python, "-m", "tinker_atropos.inference_server", "--config", str(files.config)]
        argv += ["--adapter", weights.adapter] if weights.adapter else []
        async with probe_client() as http:
            health_url = f"http://127.0.0.1:{port}/health"

            async def live_tokens() -> int | None:
                try:
                    tokens = (await http.get(health_url)).json().get("generated_tokens")
                except (httpx.HTTPError, ValueError, AttributeError):
                    return None
                return tokens if isinstance(tokens, int) else None

            try:
                server = supervised(
                    "inference server",
                    argv,
                    log_path=files.server_log,
                    env=env,
                    ready=lambda: health_ok(http, health_url),
                    ready_timeout_s=max(1.0, deadline - time.monotonic()),
                )
                async with server:
                    ports.release([port])  # bound now: nobody else can take it
                    await _run_process(req, model, files, out, env, python, tracker, deadline, live_tokens)
            except StageError as exc:
                out.error = f"the local inference server did not start: {exc}"
                out.log_tail = tail_lines(files.server_log, LOG_TAIL_LINES)
    finally:
        ports.release([port])


async def _run_process(
    req: InferenceRequest,
    model: str,
    files: InferenceTestFiles,
    out: ModelOutcome,
    env: dict[str, str],
    python: str,
    tracker: Progress,
    deadline: float,
    live_tokens: LiveTokens | None = None,
) -> None:
    argv = [
        req.env_python or python,
        "-m",
        "rl_mcp.children.env_process",
        str(process_file(req.env_file).resolve()),
        "process",
        "--config",
        str(files.config),
        "--env.data_path_to_save_groups",
        str(files.groups),
        "--env.total_steps",
        str(req.num_steps),
        "--env.group_size",
        str(req.group_size),
    ]
    offset, started, stop = 0, time.time(), None
    env = {**env, ENV_HEALTH_VAR: str(files.env_health)}
    async with supervised(
        "environment process", argv, log_path=out.log, env=env, cwd=files.folder, stop_grace_s=3.0
    ) as child:
        while child.running and time.monotonic() < deadline:
            offset = await _watch_log(out.log, offset, model, tracker)
            if stop := await _watch_health(req, model, files, started, tracker, live_tokens):
                break  # every rollout raises, or is discarded: say so now rather than at the call's timeout
            await anyio.sleep(0.25)
        timed_out = child.running and stop is None
    code = child.poll()
    await _watch_log(out.log, offset, model, tracker)
    out.warnings = marked_lines(out.log, WARNING_MARK)
    groups = read_groups(files.groups)
    out.jsonl = files.groups if files.groups.exists() else None
    out.html = files.groups_html if files.groups_html.exists() else None
    out.scores = summarize(groups) if groups else None
    out.health = health = read_health(files.env_health)
    out.at_cap = _at_cap(health, files.config)
    if not timed_out and code == 0 and groups:
        out.status = "ok"
        return
    out.log_tail = tail_lines(out.log, LOG_TAIL_LINES)
    discards = health.discards if health and health.discards and health.discards.in_a_row else None
    if stop is not None:
        out.status, out.error = stop
    elif timed_out:
        out.status = "timeout"
        why = (
            discards.line
            if discards
            else "atroposlib retries failed groups forever; see the log tail for why they fail"
        )
        scored = f"{len(groups)} of {req.num_steps} groups scored"
        out.error = f"no result within the call's {req.timeout_s:.0f} s limit: {scored} ({why})"
    elif code == 0 and discards:
        out.status, out.error = "discarded", f"the environment exited having discarded every group: {discards.line}"
    elif code == 0:
        out.error = (
            "the environment exited without writing a scored group: it ran out of items, or "
            "atroposlib skipped its groups as invalid (see the log tail)"
        )
    else:  # the environment's own record of its latest exception says where it was raised
        latest = health.error if health else None
        why = latest.line if latest else last_error_line(out.log_tail) or "see the log tail"
        out.error = f"the environment process exited with code {code}: {why}"
    if req.module_home is not None:  # what to do here first, the process's own account below
        out.error = explained(out.error, tail_lines(out.log, MODULE_TAIL_LINES), req.module_home)


async def _watch_health(
    req: InferenceRequest,
    model: str,
    files: InferenceTestFiles,
    started: float,
    tracker: Progress,
    live_tokens: LiveTokens | None,
) -> tuple[Literal["failed", "discarded"], str] | None:
    """Why to stop the environment now (it only raises, or only discards), else None; while no group
    comes, a progress report of what it is doing, now and then."""
    health, now = read_health(files.env_health), time.time()
    if health is not None:
        if why := raising(health, started, RAISING_STOP_S, now):
            return "failed", why
        if why := discarding(health, started, req.env_limits, now):
            return "discarded", why
    if tracker.due(model):
        tokens = await live_tokens() if live_tokens is not None else None
        await tracker.waiting(model, waiting_line(health, tokens, now - started, now))
    return None


def _at_cap(health: EnvHealth | None, config_file: Path) -> Limit | None:
    """What cut the replies that ran to their cap (the process's own config says what caps them)."""
    if health is None or not health.requests.replies_at_cap:
        return None
    try:
        config = read_run_config(config_file)
    except RUN_CONFIG_ERRORS:
        config = {}
    return at_cap(health.requests, config.get("env") or {}, config.get("trainer"))


async def _watch_log(log: Path, offset: int, model: str, tracker: Progress) -> int:
    """Read what the log gained since `offset`; report progress lines. Returns the new offset."""
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            chunk = fh.read()
    except FileNotFoundError:
        return offset
    end = chunk.rfind(b"\n") + 1  # whole lines only; the rest is read next time
    for match in _PROGRESS.finditer(chunk[:end].decode("utf-8", errors="replace")):
        await tracker.update(model, int(match.group(1)))
    return offset + end


async def _models_built(
    config: Mapping[str, Any], out: ModelOutcome, env: dict[str, str], python: str, log: Path, deadline: float
) -> bool:
    """Build the offline models the config names before a process loads them; False (and why) if not."""
    try:
        await build_models(config, python=python, env=env, log=log, timeout_s=max(1.0, deadline - time.monotonic()))
    except ModelBuildError as exc:
        out.error, out.log_tail = str(exc), tail_lines(log, LOG_TAIL_LINES)
        return False
    return True
