"""The server's own resources: the operator profile and the managed engine's log (subscribable: see
subscriptions.py). Each tool family registers its own (`environments/resources.py`, `runs/resources.py`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError

from rl_mcp.app import AppContext
from rl_mcp.logs import tail_lines
from rl_mcp.mcp_api.subscriptions import ENGINE_LOG_URI
from rl_mcp.runtimes.inventory import runtime_states

LOG_LINES = 200


def register_server_resources(server: MCPServer, app: AppContext) -> None:
    @server.resource(
        "rl://profile",
        name="profile",
        title="Operator profile",
        description="The active operator profile: backend, the model runs train and why, locked values, defaults; "
        "and the runtimes the server makes on first use (which exist, their sizes, the command that makes each).",
        mime_type="application/json",
    )
    async def profile_resource() -> str:
        engine = app.engine.state() if app.engine is not None else None
        public = {**app.settings.profile.public(), "chosen_because": app.settings.profile_reason}
        runtimes = [asdict(state) for state in runtime_states(app.settings.environ)]
        return json.dumps({**public, "engine_state": engine, "runtimes": runtimes}, indent=2)

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
