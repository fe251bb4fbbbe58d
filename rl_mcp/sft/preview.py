"""rl_preview_sft's work: the selection's supervised set, built by the stage's own process with
`--preview` (the environment's real tools and its chat template, one training step timed), read back.

Nothing is trained and nothing of a run changes: the preview has a folder of its own under
`RL_MCP_HOME/sft_previews/`, with the config it ran on, its log and the stage's `sft/` files.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_mcp.errors import UserError
from rl_mcp.model_build import ModelBuildError, build_models
from rl_mcp.processes import supervised, wait_exit
from rl_mcp.runs.sft_stage import sft_command, sft_env, stage_error
from rl_mcp.session.run_config import write_run_config
from rl_mcp.tmpdirs import removed_if_cancelled
from tinker_atropos.run_files import SFT_STAGE, ExitCode, RunFiles, read_json_object

Report = Callable[[str], Awaitable[None]]
REPORT_EVERY_S = 5.0


class SftPreviewError(UserError):
    """The set could not be built: the message names why (the stage's own words) and where its log is."""


@dataclass(frozen=True)
class PreviewRequest:
    config: dict[str, Any]  # the run config the selection would start with, run_dir = `folder`
    folder: Path
    env_file: Path
    python: str  # the environment's interpreter (its folder's venv, or the product's)
    timeout_s: float


async def preview_set(req: PreviewRequest, env: Mapping[str, str], report: Report) -> dict[str, Any]:
    """set.json of the stage's preview: counts, refusals, one example with its mask, the plan; the
    folder removed when the call is cancelled (its child stopped first)."""
    with removed_if_cancelled(req.folder):
        return await _preview(req, env, report)


async def _preview(req: PreviewRequest, env: Mapping[str, str], report: Report) -> dict[str, Any]:
    if not (req.config.get("env") or {}).get("sft"):
        raise SftPreviewError(
            "the selection has no `sft` section: set one first, e.g. rl_edit_config(field='sft', "
            "value={'sources': ['demonstrations']})"
        )
    files = RunFiles(req.folder)
    config = write_run_config(files.config, req.config)
    log, deadline = files.log(SFT_STAGE), time.monotonic() + req.timeout_s
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        await build_models(req.config, python=req.python, env=env, log=log, timeout_s=req.timeout_s)
    except ModelBuildError as exc:
        raise SftPreviewError(str(exc)) from exc
    argv = [*sft_command(req.python, str(config), req.env_file), "--preview"]
    started = time.monotonic()
    async with supervised("sft preview", argv, log_path=log, env=sft_env(env), stop_grace_s=5.0) as child:
        code = None
        while code is None and time.monotonic() < deadline:
            code = await wait_exit(child, min(deadline, time.monotonic() + REPORT_EVERY_S))
            if code is None:
                await report(f"building the supervised set ({time.monotonic() - started:.0f} s)")
    if code is None:
        raise SftPreviewError(f"the preview took over {req.timeout_s:.0f} s and was stopped (log: {log})")
    summary = read_json_object(files.sft_summary)
    if code == ExitCode.OK and summary is not None:
        return summary
    why = stage_error(log) or f"exit {code}"
    if summary is not None:  # every candidate refused: the refusals say why
        return {**summary, "error": why}
    raise SftPreviewError(f"the supervised set could not be built: {why} (log: {log})")
