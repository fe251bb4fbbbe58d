"""rl_export_model: a run's checkpoint out as an adapter, a merged model or a GGUF file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from rl_mcp.app import AppContext
from rl_mcp.export.answers import ExportResult, export_answer
from rl_mcp.export.plan import plan_export
from rl_mcp.export.runner import run_export
from rl_mcp.mcp_api.descriptions import tool_face
from rl_mcp.mcp_api.errors import tool_errors
from rl_mcp.mcp_api.export import descriptions
from rl_mcp.mcp_api.inputs import RunCheckpointChoice, RunId
from rl_mcp.mcp_api.progress import CallProgress


def register_export_tool(server: MCPServer, app: AppContext) -> None:
    @server.tool(
        name="rl_export_model",
        description=descriptions.RL_EXPORT_MODEL,
        **tool_face("Export a trained model", read_only=False, destructive=False, idempotent=True, open_world=True),
    )
    @tool_errors
    async def rl_export_model(
        ctx: Context,
        run_id: RunId,
        format: Annotated[
            Literal["adapter", "merged", "gguf"],
            Field(description="adapter: PEFT LoRA folder; merged: transformers model; gguf: llama.cpp/Ollama file"),
        ] = "merged",
        checkpoint: RunCheckpointChoice = None,
        dtype: Annotated[
            Literal["float32", "bfloat16", "float16", "f16", "q8_0"] | None,
            Field(description="merged: float32 (default), bfloat16, float16; gguf: f16 (default) or q8_0"),
        ] = None,
        output_dir: Annotated[
            str | None,
            Field(max_length=1000, description="Folder to write; default runs/<id>/exports/<checkpoint>-<format>"),
        ] = None,
        hub_repo: Annotated[
            str | None,
            Field(
                pattern=r"^[A-Za-z0-9][\w.-]*/[\w.-]+$",
                description="Also push the folder to this Hugging Face model repo (owner/name); needs HF_TOKEN",
            ),
        ] = None,
    ) -> ExportResult:
        plan = plan_export(app.runs.get(run_id), checkpoint, format, dtype, Path(output_dir) if output_dir else None)
        engine = plan.tinker_base_url if plan.self_hosted else None
        progress = CallProgress(ctx.report_progress)
        await app.training_runtime(progress.note)  # the export's child runs there: made on first use
        outcome = await run_export(
            plan,
            environ=app.settings.environ,
            python=app.settings.python,
            hub_repo=hub_repo,
            progress=progress.phase(),
            engine_hold=app.engine_hold(engine, progress.note),
        )
        return export_answer(outcome)
