"""rl_preview_sft: the selection's supervised set, built by the stage's own process, before any run."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from rl_mcp.app import AppContext
from rl_mcp.formats import process_file
from rl_mcp.inference.target import new_test_dir
from rl_mcp.mcp_api.descriptions import tool_face
from rl_mcp.mcp_api.errors import tool_errors
from rl_mcp.mcp_api.progress import CallProgress
from rl_mcp.mcp_api.sft import descriptions
from rl_mcp.runs.sft_stage import with_teacher_key
from rl_mcp.session.run_config import render_run_config
from rl_mcp.settings import without_secrets
from rl_mcp.sft.answers import SftPreview, preview_answer
from rl_mcp.sft.preview import PreviewRequest, preview_set

DEFAULT_TIMEOUT_S = 270.0  # under Hermes' default 300 s tool timeout
UNUSED_PORT = 1  # the preview serves nothing and joins no run-api: any valid port number


def register_sft_tool(server: MCPServer, app: AppContext) -> None:
    @server.tool(
        name="rl_preview_sft",
        description=descriptions.RL_PREVIEW_SFT,
        **tool_face(
            "Preview the supervised stage", read_only=False, destructive=False, idempotent=True, open_world=True
        ),
    )
    @tool_errors
    async def rl_preview_sft(
        ctx: Context,
        timeout_s: Annotated[
            float, Field(ge=10, le=3600, description="Time limit in seconds: a preview still building is then stopped")
        ] = DEFAULT_TIMEOUT_S,
    ) -> SftPreview:
        settings, progress = app.settings, CallProgress(ctx.report_progress)
        info, schema = await app.runnable_schema(progress.note)
        runtime = await app.runtime(info)
        folder = new_test_dir(settings.home / "sft_previews", info.name)
        config = render_run_config(
            profile=settings.profile,
            schema=schema,
            state=app.session.state,
            api_port=UNUSED_PORT,
            inference_port=UNUSED_PORT,
            run_dir=folder,
            engine_url=app.engine_url,
        )
        req = PreviewRequest(config, folder, process_file(info.file), runtime.python, timeout_s)
        # the environment's own variables and the teacher's key; the preview trains nothing: no trainer secret
        env = with_teacher_key(
            without_secrets(settings.environ, allow=settings.env_process_vars), config, settings.environ
        )
        return preview_answer(info.name, folder, await preview_set(req, env, progress.note))
