"""rl_test_inference: run the selected environment's `process` mode against real inference.

One `process` subprocess per model, each with a fresh output folder (atroposlib would write
`x_1.jsonl` next to an old `x.jsonl`), W&B off unless WANDB_API_KEY is set, a per-model
timeout, a few models at a time. Scores come from the JSONL atroposlib writes.

Targets: an OpenAI-compatible `base_url` (with `models` and the name of the env var holding its
key); OpenRouter when OPENROUTER_API_KEY is set; else the local backend's inference server,
started for the test on a free port (sglang type: real tokens and logprobs) and stopped after.

Keys travel only by environment variable: the YAML names no key (`api_key: null`), and the child
gets the key as OPENAI_API_KEY, which the openai client reads when `api_key` is None.
"""

from __future__ import annotations

import copy
import re
import secrets
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

import anyio
import httpx

from rl_mcp.jsonl_scores import ScoreSummary, read_groups, summarize
from rl_mcp.logs import tail_lines
from rl_mcp.models import InferenceSample, InferenceTestResult, ModelInferenceResult
from rl_mcp.runs.ports import PortReservations
from rl_mcp.runs.processes import Child, StageError, spawn, stop, wait_ready
from rl_mcp.session import render_run_config, write_run_config
from rl_mcp.settings import without_secrets

if TYPE_CHECKING:
    from rl_mcp.context import AppContext

OPENROUTER_BASE_URL = "https://openrouter.ai/api/v1"
OPENROUTER_KEY_ENV = "OPENROUTER_API_KEY"
OPENROUTER_MODELS = ("qwen/qwen3-8b", "z-ai/glm-4.7-flash", "minimax/minimax-m2.5")
TINY_CHAT = "tiny-chat"  # the local server's model when the profile trains on Tinker
# Keys the children never need: the one key a test uses reaches them as OPENAI_API_KEY only.
_NO_KEY = "none"  # the openai client insists on some key; servers without auth ignore it
_PROGRESS = re.compile(r"Successfully processed group (\d+)/(\d+)")
_ENV_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
LOG_TAIL_LINES = 25
MAX_PARALLEL = 3

ProgressFn = Callable[[float, float, str], Awaitable[None]]


class InferenceTestError(ValueError):
    """Bad arguments or a missing key: nothing was started. The message says what to do."""


@dataclass(frozen=True)
class Target:
    """Where the models are served. `base_url` is None for the local server (one per model)."""

    kind: Literal["openrouter", "openai_compatible", "local"]
    models: tuple[str, ...]
    base_url: str | None
    key_env: str | None
    server_type: Literal["openai", "sglang"]


@dataclass
class ModelOutcome:
    model: str
    status: Literal["ok", "failed", "timeout"]
    seconds: float
    output_dir: Path
    log: Path
    jsonl: Path | None = None
    html: Path | None = None
    server_log: Path | None = None
    scores: ScoreSummary | None = None
    error: str | None = None
    log_tail: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class InferenceRequest:
    """What to test: the environment, its run config (no secrets), and how much."""

    env_name: str
    env_file: Path
    base_config: Mapping[str, Any]
    num_steps: int
    group_size: int
    timeout_s: float
    out_dir: Path


def resolve_target(
    *,
    models: Sequence[str] | None,
    base_url: str | None,
    api_key_env: str | None,
    environ: Mapping[str, str],
    local_model: str,
) -> Target:
    """Pick the inference target from the arguments and the keys present (never their values)."""
    names = tuple(dict.fromkeys(m.strip() for m in models or () if m and m.strip()))
    if api_key_env is not None:  # never echoed unless it is set: a mistaken value may be the key itself
        if not _ENV_VAR_NAME.match(api_key_env) or not environ.get(api_key_env):
            raise InferenceTestError(
                "api_key_env must be the NAME of an environment variable that is set in the MCP server's "
                "environment (e.g. MY_API_KEY), never the key itself: set the variable there and pass its name"
            )
    if base_url:
        if "@" in urlsplit(base_url).netloc:  # checked first: this message never echoes the URL
            raise InferenceTestError("base_url must not carry credentials (user:key@host): put the key in an "
                                     "environment variable and pass its name as api_key_env")
        if not re.match(r"^https?://[^/\s]+", base_url):
            raise InferenceTestError(f"base_url must be an http(s) URL such as http://host:8000/v1, got {base_url!r}")
        if not names:
            raise InferenceTestError("base_url needs models: the model names that server serves")
        return Target("openai_compatible", names, base_url.rstrip("/"), api_key_env, "openai")
    key_env = api_key_env or (OPENROUTER_KEY_ENV if environ.get(OPENROUTER_KEY_ENV) else None)
    if key_env:
        return Target("openrouter", names or OPENROUTER_MODELS, OPENROUTER_BASE_URL, key_env, "openai")
    return Target("local", names or (local_model,), None, None, "sglang")


def child_env(environ: Mapping[str, str], target: Target) -> dict[str, str]:
    """The children's environment: no inherited keys; the target's key as OPENAI_API_KEY only."""
    env = {k: v for k, v in without_secrets(environ).items() if not k.startswith("OPENAI_")}
    if target.key_env:
        env.pop(target.key_env, None)
    env["OPENAI_API_KEY"] = environ[target.key_env] if target.key_env else _NO_KEY
    if environ.get("WANDB_API_KEY"):
        env["WANDB_API_KEY"] = environ["WANDB_API_KEY"]
    else:
        env["WANDB_MODE"] = "disabled"
    if target.server_type == "openai":
        env["ATROPOS_ALLOW_DUMMY_MANAGED_SERVER"] = "1"  # managed-server envs on plain chat APIs
    env["PYTHONUNBUFFERED"] = "1"
    return env


def model_slug(model: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", model).strip("._") or "model"


def new_test_dir(root: Path, env_name: str) -> Path:
    """A fresh folder per test call: never reuse one (atroposlib appends `_1` to old files)."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = root / f"{model_slug(env_name)}-{stamp}-{secrets.token_hex(3)}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def process_config(
    req: InferenceRequest, target: Target, model: str, *, base_url: str, tokenizer: str | None, run_dir: Path,
    inference_port: int | None, use_wandb: bool,
) -> dict[str, Any]:
    """The per-model run YAML: the base config, this model as the one server, no key in it."""
    cfg = copy.deepcopy(dict(req.base_config))
    env = cfg.setdefault("env", {})
    env.pop("rollout_server_url", None)  # process mode talks to no run-api
    env["use_wandb"] = use_wandb
    env["wandb_name"] = f"{req.env_name}-inference-{model_slug(model)}"
    env["data_dir_to_save_evals"] = str(run_dir)
    # What process mode sets for itself, unless the YAML says otherwise (the run config does):
    # keep all-equal groups (they are what a test must show) and the messages (for samples).
    env["ensure_scores_are_not_same"] = False
    env["include_messages"] = True
    tokenizer = tokenizer or env.get("tokenizer_name") or model
    env["tokenizer_name"] = tokenizer
    cfg["openai"] = [
        {
            "model_name": model,
            "base_url": base_url,
            "api_key": None,  # the openai client then reads OPENAI_API_KEY from the environment
            "server_type": target.server_type,
            "tokenizer_name": tokenizer,
            "timeout": int(max(10, req.timeout_s)),
            "health_check": False,  # its 1 s ping is a paid request on OpenRouter; we probe ourselves
        }
    ]
    if inference_port is None:
        cfg.pop("tinker", None)  # read by the local server only; the environment ignores it
    else:
        tinker = cfg.setdefault("tinker", {})
        tinker.update(
            backend="local", base_model=model, inference_host="127.0.0.1",
            inference_port=inference_port, run_dir=str(run_dir), use_wandb=False,
        )
    return cfg


async def probe_reachable(base_url: str, timeout_s: float = 10.0) -> str | None:
    """Why nothing can answer at `base_url` (refused, unknown host), else None. Sends no key.

    Only a failed connection counts: a slow or erroring server is left to the test to judge."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            await client.get(f"{base_url}/models")
    except (httpx.ConnectError, httpx.UnsupportedProtocol) as exc:
        return f"cannot connect to {base_url} ({exc or type(exc).__name__}): check the URL and that the server is up"
    except httpx.HTTPError:
        pass
    return None


class _Progress:
    """Counts scored groups over all models and reports each new one."""

    def __init__(self, per_model: int, models: int, report: ProgressFn | None) -> None:
        self.per_model = per_model
        self.total = per_model * models
        self.done: dict[str, int] = {}
        self._report = report

    async def update(self, model: str, groups: int) -> None:
        if groups <= self.done.get(model, 0):
            return
        self.done[model] = groups
        if self._report is not None:
            message = f"{model}: group {groups}/{self.per_model} scored"
            await self._report(float(sum(self.done.values())), float(self.total), message)


async def run_inference_test(
    req: InferenceRequest,
    target: Target,
    *,
    environ: Mapping[str, str],
    python: str = sys.executable,
    ports: PortReservations | None = None,
    progress: ProgressFn | None = None,
    max_parallel: int = MAX_PARALLEL,
) -> list[ModelOutcome]:
    """Test every model of `target`; returns one outcome per model, in the order given."""
    ports = ports or PortReservations()
    tracker = _Progress(req.num_steps, len(target.models), progress)
    limiter = anyio.CapacityLimiter(1 if target.kind == "local" else max_parallel)  # local: one model in RAM
    outcomes: dict[str, ModelOutcome] = {}

    async def one(model: str) -> None:
        async with limiter:
            outcomes[model] = await _test_model(req, target, model, environ, python, ports, tracker)

    async with anyio.create_task_group() as tg:
        for model in target.models:
            tg.start_soon(one, model)
    return [outcomes[m] for m in target.models]


async def _test_model(
    req: InferenceRequest, target: Target, model: str, environ: Mapping[str, str], python: str,
    ports: PortReservations, tracker: _Progress,
) -> ModelOutcome:
    started = time.monotonic()
    run_dir = req.out_dir / model_slug(model)
    run_dir.mkdir(parents=True, exist_ok=True)
    out = ModelOutcome(model=model, status="failed", seconds=0.0, output_dir=run_dir, log=run_dir / "process.log")
    deadline = started + req.timeout_s
    env = child_env(environ, target)
    server: Child | None = None
    port: int | None = None
    try:
        if target.kind == "local":
            port = ports.reserve(1)[0]
            base_url, tokenizer = f"http://127.0.0.1:{port}/v1", _local_tokenizer(model)
        else:
            base_url, tokenizer = str(target.base_url), None
        cfg_path = run_dir / "config.yaml"
        write_run_config(cfg_path, process_config(
            req, target, model, base_url=base_url, tokenizer=tokenizer, run_dir=run_dir,
            inference_port=port, use_wandb=bool(environ.get("WANDB_API_KEY")),
        ))
        if port is not None:
            out.server_log = run_dir / "server.log"
            if not await _ensure_local_model(model, python, env, out.server_log, deadline):
                out.error = f"could not build the offline model {model!r} (see the log tail)"
                out.log_tail = tail_lines(out.server_log, LOG_TAIL_LINES)
                return out
            argv = [python, "-m", "tinker_atropos.inference_server", "--config", str(cfg_path)]
            server = spawn("inference server", argv, log_path=out.server_log, env=env)
            try:
                left = max(1.0, deadline - time.monotonic())
                await wait_ready("inference", server, _health_check(port), timeout_s=left)
            except StageError as exc:
                out.error = f"the local inference server did not start: {exc}"
                out.log_tail = tail_lines(out.server_log, LOG_TAIL_LINES)
                return out
            ports.release([port])  # bound now: nobody else can take it
        await _run_process(req, model, cfg_path, run_dir, out, env, python, tracker, deadline)
    finally:
        if port is not None:
            ports.release([port])
        if server is not None:
            with anyio.CancelScope(shield=True):
                await stop(server, grace_s=5.0)
        out.seconds = round(time.monotonic() - started, 2)
    return out


async def _run_process(
    req: InferenceRequest, model: str, cfg_path: Path, run_dir: Path, out: ModelOutcome, env: dict[str, str],
    python: str, tracker: _Progress, deadline: float,
) -> None:
    jsonl = run_dir / "groups.jsonl"
    argv = [
        python, "-m", "rl_mcp.env_process", str(req.env_file.resolve()), "process", "--config", str(cfg_path),
        "--env.data_path_to_save_groups", str(jsonl),
        "--env.total_steps", str(req.num_steps), "--env.group_size", str(req.group_size),
    ]
    child = spawn("environment process", argv, log_path=out.log, env=env, cwd=run_dir)
    offset = 0
    try:
        while child.running and time.monotonic() < deadline:
            offset = await _watch_log(out.log, offset, model, tracker)
            await anyio.sleep(0.25)
    finally:
        with anyio.CancelScope(shield=True):
            code = await stop(child, grace_s=3.0) if child.running else child.poll()
    await _watch_log(out.log, offset, model, tracker)
    groups = read_groups(jsonl)
    out.jsonl = jsonl if jsonl.exists() else None
    html = jsonl.with_suffix(".html")
    out.html = html if html.exists() else None
    out.scores = summarize(groups) if groups else None
    if code == 0 and groups:
        out.status = "ok"
        return
    out.log_tail = tail_lines(out.log, LOG_TAIL_LINES)
    if time.monotonic() >= deadline and code != 0:
        out.status = "timeout"
        out.error = (
            f"no result within {req.timeout_s:.0f} s: {len(groups)} of {req.num_steps} groups scored "
            f"(atroposlib retries failed groups forever; see the log tail for why they fail)"
        )
    elif code == 0:
        out.error = ("the environment exited without writing a scored group: it ran out of items, or "
                     "atroposlib skipped its groups as invalid (see the log tail)")
    else:
        why = _last_error(out.log_tail) or "see the log tail"
        out.error = f"the environment process exited with code {code}: {why}"


async def _watch_log(log: Path, offset: int, model: str, tracker: _Progress) -> int:
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


def _health_check(port: int) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        try:
            async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:  # our loopback server: no proxy
                resp = await client.get(f"http://127.0.0.1:{port}/health")
            return resp.status_code == 200
        except httpx.HTTPError:
            return False

    return check


async def _ensure_local_model(model: str, python: str, env: dict[str, str], log: Path, deadline: float) -> bool:
    """Build an offline model (tiny-chat, ...) before a config points at its folder."""
    from tinker_atropos.models.paths import is_offline_model, model_dir  # torch-free by contract

    if not is_offline_model(model) or (model_dir(model) / "config.json").exists():
        return True
    child = spawn("model build", [python, "-m", "tinker_atropos.models", "ensure", model], log_path=log, env=env)
    try:
        while child.running and time.monotonic() < deadline:
            await anyio.sleep(0.2)
    finally:
        with anyio.CancelScope(shield=True):
            code = await stop(child, grace_s=3.0) if child.running else child.poll()
    return code == 0


def _local_tokenizer(model: str) -> str:
    """The local server's tokenizer: the offline model's folder, or the hub name / folder given."""
    from tinker_atropos.models.paths import model_ref  # torch-free by contract

    return model_ref(model)


def _last_error(lines: Sequence[str]) -> str | None:
    """The last `SomeError: message` line of a traceback, if the tail has one."""
    for line in reversed(lines):
        if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b", line.strip()):
            return line.strip()
    return None


async def run_for_selection(
    app: AppContext,
    *,
    num_steps: int,
    group_size: int,
    models: Sequence[str] | None,
    base_url: str | None,
    api_key_env: str | None,
    timeout_s: float,
    progress: ProgressFn | None = None,
) -> InferenceTestResult:
    """rl_test_inference on the selected environment with its current config (profile + edits).

    Raises InferenceTestError (bad arguments, missing key, endpoint unreachable: nothing ran),
    and NoSelection / IntrospectionError from the selection (the latter with the traceback tail).
    """
    settings = app.settings
    info, schema = await app.selected_schema()
    profile = settings.profile
    target = resolve_target(
        models=models, base_url=base_url, api_key_env=api_key_env, environ=settings.environ,
        local_model=profile.model if profile.backend == "local" else TINY_CHAT,
    )
    if target.base_url and (why := await probe_reachable(target.base_url)):
        raise InferenceTestError(why)
    out_dir = new_test_dir(settings.home / "inference_tests", info.name)
    # Ports are per model (local server) or unused (process mode talks to no run-api): 0 here.
    base = render_run_config(profile=profile, schema=schema, state=app.session.state, api_port=0,
                             inference_port=0, run_dir=out_dir)
    req = InferenceRequest(env_name=info.name, env_file=info.file, base_config=base, num_steps=num_steps,
                      group_size=group_size, timeout_s=timeout_s, out_dir=out_dir)
    outcomes = await run_inference_test(
        req, target, environ=settings.environ, python=settings.python,
        ports=app.runs.ports if app.runs is not None else None, progress=progress,
    )
    return _answer(req, target, outcomes)


def _answer(req: InferenceRequest, target: Target, outcomes: list[ModelOutcome]) -> InferenceTestResult:
    results = [_model_result(o) for o in outcomes]
    ran = [r for r in results if r.status == "ok"]
    best = max(ran, key=lambda r: (r.accuracy, r.mean_score), default=None)
    working = bool(ran)
    if working:
        next_step = ("The environment works: rl_start_training to train on it. Read samples / output_html "
                     "to check the rewards make sense; all-equal scores in a group give no learning signal.")
    else:
        next_step = ("Nothing ran end to end: read each model's error and log_tail, fix the environment "
                     "(rl://environments/{name} shows its source) or the endpoint, then call rl_test_inference again.")
    return InferenceTestResult(
        environment=req.env_name,
        target=target.kind,
        base_url=target.base_url,
        key_env=target.key_env,
        num_steps=req.num_steps,
        group_size=req.group_size,
        results=results,
        best_model=best.model if best else None,
        mean_accuracy=round(sum(r.accuracy for r in ran) / len(ran), 4) if ran else None,
        environment_working=working,
        output_dir=str(req.out_dir),
        next_step=next_step,
    )


def _model_result(o: ModelOutcome) -> ModelInferenceResult:
    s = o.scores
    return ModelInferenceResult(
        model=o.model,
        status=o.status,
        seconds=o.seconds,
        steps_tested=s.steps_tested if s else 0,
        completions=s.completions if s else 0,
        correct=s.correct if s else 0,
        accuracy=round(s.accuracy, 4) if s else 0.0,
        step_success_rate=round(s.step_success_rate, 4) if s else 0.0,
        mean_score=round(s.mean_score, 4) if s else 0.0,
        step_scores=s.step_scores if s else [],
        real_logprobs=s.has_logprobs if s else False,
        samples=[InferenceSample(**asdict(x)) for x in s.samples] if s else [],
        output_jsonl=str(o.jsonl) if o.jsonl else None,
        output_html=str(o.html) if o.html else None,
        log=str(o.log),
        server_log=str(o.server_log) if o.server_log else None,
        config=str(o.output_dir / "config.yaml"),
        error=o.error,
        log_tail=o.log_tail,
    )
