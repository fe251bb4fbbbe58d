"""rl_test_inference: the selected environment's config, handed to the runner as plain values."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

from rl_mcp.app import AppContext
from rl_mcp.inference.answers import InferenceTestResult, inference_answer
from rl_mcp.inference.run_weights import ModelsAsked, chosen_target
from rl_mcp.inference.runner import run_inference_test
from rl_mcp.inference.target import (
    TINY_CHAT,
    InferenceRequest,
    InferenceTestError,
    new_test_dir,
    probe_reachable,
)
from rl_mcp.mcp_api.descriptions import tool_face
from rl_mcp.mcp_api.errors import tool_errors
from rl_mcp.mcp_api.inference import descriptions
from rl_mcp.mcp_api.inputs import RunId
from rl_mcp.mcp_api.progress import CallProgress
from rl_mcp.session.run_config import render_run_config
from rl_mcp.tmpdirs import removed_if_cancelled

DEFAULT_TIMEOUT_S = 270.0  # under Hermes' default 300 s tool timeout (the example config gives 900)


def register_inference_tool(server: MCPServer, app: AppContext) -> None:
    @server.tool(
        name="rl_test_inference",
        description=descriptions.RL_TEST_INFERENCE,
        **tool_face(
            "Test the environment against inference",
            read_only=False,
            destructive=False,
            idempotent=False,
            open_world=True,
        ),
    )
    @tool_errors
    async def rl_test_inference(
        ctx: Context,
        # strict: a count given as a string is refused, not converted (each call starts real work)
        num_steps: Annotated[
            int, Field(strict=True, ge=1, le=100, description="Groups (steps) to score per model")
        ] = 3,
        group_size: Annotated[int, Field(strict=True, ge=1, le=64, description="Completions per group")] = 16,
        models: Annotated[
            list[Annotated[str, Field(min_length=1, max_length=200)]] | None,
            Field(max_length=8, description="Model names; default: OpenRouter's three, or the local model"),
        ] = None,
        base_url: Annotated[
            str | None,
            Field(
                max_length=500,
                pattern=r"^https?://\S+$",
                description="An OpenAI-compatible endpoint, e.g. http://host:8000/v1 (needs models)",
            ),
        ] = None,
        api_key_env: Annotated[
            str | None,
            Field(
                max_length=100,  # checked in resolve_target, whose errors never echo it (it may be a key)
                description="NAME of the server-side environment variable holding the endpoint's key "
                "(e.g. MY_API_KEY), never the key itself",
            ),
        ] = None,
        target: Annotated[
            Literal["local", "openrouter", "base_url"] | None,
            Field(
                description="Where to send requests: 'local' (this machine's small model), 'openrouter' "
                "(needs OPENROUTER_API_KEY), 'base_url' (the endpoint given). Default: base_url if given, "
                "else OpenRouter if its key is set, else 'local' on the local profile and an error on a "
                "remote one (never a silent fallback to the local model)"
            ),
        ] = None,
        timeout_s: Annotated[
            float,
            Field(
                ge=10,
                le=3600,
                description="Time limit of the whole call in seconds (all models): models still running "
                "then are stopped and reported as timeout. The default stays under common client limits "
                "(Hermes: 300 s unless its config says otherwise)",
            ),
        ] = DEFAULT_TIMEOUT_S,
        run_id: Annotated[
            RunId | None,
            Field(
                description="Test this run's trained weights (on this machine's inference server) beside its base model"
            ),
        ] = None,
        checkpoint_step: Annotated[
            int | None, Field(strict=True, ge=0, description="With run_id: the step's checkpoint (default: the newest)")
        ] = None,
    ) -> InferenceTestResult:
        settings, profile = app.settings, app.settings.profile
        # the local backend's model, or a self-hosted engine's (the same offline folder it loads)
        on_this_machine = profile.backend == "local" or profile.engine is not None
        progress = CallProgress(ctx.report_progress)
        info, schema = await app.runnable_schema(progress.note)
        runtime = await app.runtime(info)  # installed by now: where its process runs
        asked = ModelsAsked(run_id, checkpoint_step, models, base_url, api_key_env, target)
        local_model = profile.model if on_this_machine else TINY_CHAT
        where, run = chosen_target(
            asked, app.runs.get, environ=settings.environ, local_model=local_model, local_default=on_this_machine
        )
        if where.base_url and (why := await probe_reachable(where.base_url)):
            raise InferenceTestError(why)
        out_dir = new_test_dir(settings.home / "inference_tests", info.name)
        # Ports are per model (local server) or unused (process mode talks to no run-api): 0 here.
        base = render_run_config(
            profile=profile,
            schema=schema,
            state=app.session.state,
            api_port=0,
            inference_port=0,
            run_dir=out_dir,
            engine_url=app.engine_url,
        )
        req = InferenceRequest(
            env_name=info.name,
            env_file=info.file,
            base_config=base,
            num_steps=num_steps,
            group_size=group_size,
            timeout_s=timeout_s,
            out_dir=out_dir,
            env_limits=settings.env_limits,
            env_python=runtime.python,
            module_home=runtime.home,
        )
        engine = next((w.engine_url for w in where.weights.values() if w.engine_url), None)
        # the test's folder, made above: a cancelled test's scores are partial and no answer names them
        with removed_if_cancelled(out_dir):
            async with app.engine_hold(engine, progress.note):
                outcomes = await run_inference_test(
                    req,
                    where,
                    environ=settings.environ,
                    pass_env=settings.env_process_vars,
                    python=settings.python,
                    ports=app.runs_manager.ports if app.runs_manager is not None else None,
                    progress=progress.phase(),
                )
        return inference_answer(req, where, outcomes, run)
