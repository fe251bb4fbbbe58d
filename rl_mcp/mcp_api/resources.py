"""The resources: environments and their source, the profile, and each run's status, config,
metrics and logs (the last two subscribable: see subscriptions.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from rl_mcp.app import AppContext
from rl_mcp.errors import UserError
from rl_mcp.logs import tail_lines
from rl_mcp.mcp_api import run_views
from rl_mcp.mcp_api.environment_views import environment_list
from rl_mcp.mcp_api.inputs import ENV_NAME_PATTERN, RUN_ID_PATTERN
from rl_mcp.mcp_api.subscriptions import ENGINE_LOG_URI, RUNS_URI
from rl_mcp.runs.metrics import MetricsCache
from rl_mcp.runs.store import RunRecord
from tinker_atropos.run_files import ProcessName

MAX_SOURCE_BYTES = 2_000_000
LOG_LINES = 200


def register_environment_resources(server: MCPServer, app: AppContext) -> None:
    @server.resource(
        "rl://environments",
        name="environments",
        title="RL environments",
        description="The environments rl_list_environments reports, as JSON.",
        mime_type="application/json",
    )
    async def environments_resource() -> str:
        return environment_list(app.catalog(), app.session.state.environment).model_dump_json(indent=2)

    @server.resource(
        "rl://environments/{name}",
        name="environment-source",
        title="Environment source",
        description="The Python source of one environment (name as in rl_list_environments).",
        mime_type="text/x-python",
    )
    async def environment_source(name: str) -> str:
        if not re.fullmatch(ENV_NAME_PATTERN, name):
            raise ResourceError(f"invalid environment name {name!r}: expected letters, digits, '_', '.', ':', '-'")
        try:
            info = app.environment(name)  # the path comes from the catalog, never from the name
        except UserError as exc:
            raise ResourceNotFoundError(str(exc)) from exc
        with open(info.file, "rb") as fh:
            return fh.read(MAX_SOURCE_BYTES).decode(errors="replace")

    @server.resource(
        "rl://profile",
        name="profile",
        title="Operator profile",
        description="The active operator profile: backend, the model runs train and why, locked values, defaults.",
        mime_type="application/json",
    )
    async def profile_resource() -> str:
        engine = app.engine.state() if app.engine is not None else None
        public = {**app.settings.profile.public(), "chosen_because": app.settings.profile_reason}
        return json.dumps({**public, "engine_state": engine}, indent=2)

    @server.resource(
        ENGINE_LOG_URI,
        name="engine-log",
        title="Engine log",
        mime_type="text/plain",
        description="The last 200 lines of the self-hosted Tinker engine's log (the skyrl profile's SkyRL "
        "engine, started with the first run). Subscribable: updates are pushed at most twice a second.",
    )
    def engine_log() -> str:
        if app.engine is None:
            raise ResourceNotFoundError(
                f"profile {app.settings.profile.name!r} has no engine managed by this server (the skyrl profile has)"
            )
        if not app.engine.log_path.is_file():
            return f"(the engine has not started yet; its log will be {app.engine.log_path})"
        return "\n".join(tail_lines(app.engine.log_path, LOG_LINES))


def engine_files(app: AppContext) -> Callable[[], dict[str, list[Path]]]:
    """The engine's log, watched for subscribers of rl://engine/log."""
    return lambda: {ENGINE_LOG_URI: [app.engine.log_path]} if app.engine is not None else {}


def register_run_resources(server: MCPServer, app: AppContext, cache: MetricsCache) -> None:
    def record(run_id: str) -> RunRecord:
        if not re.fullmatch(RUN_ID_PATTERN, run_id):
            raise ResourceError(f"invalid run id {run_id!r}")
        try:
            return app.runs.get(run_id)
        except UserError as exc:
            raise ResourceNotFoundError(str(exc)) from exc

    @server.resource(
        RUNS_URI,
        name="runs",
        title="Training runs",
        mime_type="application/json",
        description="Every training run (rl_list_runs as JSON). Sends list-changed when runs appear.",
    )
    def runs_resource() -> str:
        runs = [run_views.summary(r, cache).model_dump(mode="json") for r in app.runs.list()]
        return json.dumps({"runs": runs}, indent=1)

    @server.resource(
        "rl://runs/{run_id}",
        name="run",
        title="Training run",
        mime_type="application/json",
        description="One run's status (rl_check_status without the rate limit).",
    )
    def run_resource(run_id: str) -> str:
        rec = record(run_id)
        view = run_views.status(rec, app.runs.children(run_id), cache, app.settings)
        return view.model_dump_json(indent=1)

    @server.resource(
        "rl://runs/{run_id}/config",
        name="run-config",
        title="Run config",
        mime_type="application/yaml",
        description="The run's config.yaml (holds no secret).",
    )
    def run_config(run_id: str) -> str:
        rec = record(run_id)
        try:
            with open(rec.config_path, encoding="utf-8") as fh:
                return fh.read()
        except OSError as exc:
            raise ResourceNotFoundError(f"config of run {run_id} is gone: {exc}") from exc

    @server.resource(
        "rl://runs/{run_id}/metrics",
        name="run-metrics",
        title="Run metrics",
        mime_type="application/json",
        description="Per-step metrics (downsampled) and evaluations. Subscribable: updates "
        "are pushed at most twice a second.",
    )
    def run_metrics(run_id: str) -> str:
        return json.dumps(run_views.metrics_document(record(run_id), cache), indent=1)

    @server.resource(
        "rl://runs/{run_id}/logs/{process}",
        name="run-log",
        title="Run log",
        mime_type="text/plain",
        description="The last 200 lines of one process's log: process is api, trainer or env. "
        "Subscribable: updates are pushed at most twice a second.",
    )
    def run_log(run_id: str, process: str) -> str:
        if process not in list(ProcessName):
            raise ResourceError(f"unknown process {process!r}: use api, trainer or env")
        path = record(run_id).log_path(process)
        if not path.is_file():
            raise ResourceError(f"log file {path} is missing (deleted, or the process never started)")
        return "\n".join(tail_lines(path, LOG_LINES))
