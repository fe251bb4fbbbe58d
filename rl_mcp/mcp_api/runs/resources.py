"""Each run's resources: the list of runs, a run's status, config, metrics and logs (the last two
subscribable: see mcp_api/subscriptions.py)."""

from __future__ import annotations

import json
import re

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError

from rl_mcp.app import AppContext
from rl_mcp.errors import UserError
from rl_mcp.logs import tail_lines
from rl_mcp.mcp_api.inputs import RUN_ID_PATTERN
from rl_mcp.mcp_api.resources import LOG_LINES
from rl_mcp.mcp_api.subscriptions import RUNS_URI
from rl_mcp.runs import reports
from rl_mcp.runs.metrics import MetricsCache
from rl_mcp.runs.store import RunRecord
from tinker_atropos.run_files import ProcessName


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
        runs = [reports.summary(r, cache).model_dump(mode="json") for r in app.runs.list()]
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
        view = reports.status(rec, app.runs.children(run_id), cache, app.settings)
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
        return json.dumps(reports.metrics_document(record(run_id), cache), indent=1)

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
