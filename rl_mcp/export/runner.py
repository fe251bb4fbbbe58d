"""One export from plan to answer: the conversion and its check in a child process (progress read
from its progress file), the model card, and the optional push to the Hub in a second child. The
folder is written under a hidden name beside it and renamed once complete; a cancelled export leaves
neither that nor its work folder, and the folder it would have replaced stays as it was."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from rl_mcp.export.card import CURVE, write_card
from rl_mcp.export.hub_check import check_hub
from rl_mcp.export.plan import ExportError, ExportPlan, verify_prompts
from rl_mcp.inference.progress import ProgressFn
from rl_mcp.logs import last_error_line, tail_lines
from rl_mcp.processes import supervised, wait_exit
from rl_mcp.settings import without_secrets
from rl_mcp.tmpdirs import remove_tree, removed_if_cancelled
from tinker_atropos.export.model_facts import base_facts
from tinker_atropos.run_files import RunFiles, read_jsonl

EXPORT_TIMEOUT_S = 1800.0
PUSH_TIMEOUT_S = 600.0


@dataclass
class ExportOutcome:
    plan: ExportPlan
    dtype: str  # as written (the format's default when none was asked)
    files: list[dict[str, Any]]
    load_command: str
    verification: dict[str, Any]
    card: Path
    hub_url: str | None = None
    warnings: list[str] = field(default_factory=list)


async def run_export(
    plan: ExportPlan,
    *,
    environ: Mapping[str, str],
    python: str = sys.executable,
    hub_repo: str | None = None,
    progress: ProgressFn | None = None,
    engine_hold: AbstractAsyncContextManager[object] | None = None,
) -> ExportOutcome:
    """Convert, check, describe (and push); an ExportError with the child's reason otherwise. The Hub
    is checked first, before `engine_hold` (a self-hosted engine kept up, started if it idled) is
    entered: a push that cannot happen starts nothing."""
    if hub_repo:
        await check_hub(hub_repo, environ)
    async with engine_hold or nullcontext():
        return await _export(plan, environ, python, hub_repo, progress)


async def _export(
    plan: ExportPlan, environ: Mapping[str, str], python: str, hub_repo: str | None, progress: ProgressFn | None
) -> ExportOutcome:
    # the child's prompts, progress, result and log: beside the run's exports, never in the folder a user ships
    work = RunFiles(plan.run_dir).exports_dir / f".work-{plan.out.name}"
    # the folder is written under another name and renamed once complete: an export cut short (failed,
    # cancelled, the server gone) never leaves a half-written folder, nor loses the one it would replace
    staging = plan.out.with_name(f".{plan.out.name}.partial")
    for folder in (work, staging):
        shutil.rmtree(folder, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        staging.mkdir(parents=True)
    except OSError as exc:
        raise ExportError(f"cannot write the export's folder {plan.out}: {exc}") from exc
    try:
        with removed_if_cancelled(work):  # kept only when something failed, for its log
            outcome = await _convert(plan, environ, python, progress, work, staging)
    finally:
        remove_tree(staging)  # renamed into place on success: then nothing is left to remove
    if hub_repo:
        with removed_if_cancelled(work):
            outcome.hub_url = await _push(plan, hub_repo, environ, python, work)
    shutil.rmtree(work, ignore_errors=True)
    return outcome


async def _convert(
    plan: ExportPlan,
    environ: Mapping[str, str],
    python: str,
    progress: ProgressFn | None,
    work: Path,
    staging: Path,
) -> ExportOutcome:
    """The export child writes `staging`, checked, with its model card; then it becomes `plan.out`."""
    prompts, progress_file, result_file = work / "prompts.json", work / "progress.jsonl", work / "export.json"
    prompts.write_text(json.dumps(verify_prompts(plan.run_dir)))
    argv = [python, "-m", "tinker_atropos.export", "--base-model", plan.base_model, "--format", plan.format]
    if plan.self_hosted:  # the sampler checkpoint's archive, from the engine
        argv += ["--engine-checkpoint", plan.checkpoint.path]
    elif plan.tinker_state:
        argv += ["--tinker-state", plan.tinker_state]
    else:
        argv += ["--adapter", plan.checkpoint.path]
    if (plan.self_hosted or plan.tinker_state) and plan.tinker_base_url:
        argv += ["--tinker-base-url", plan.tinker_base_url]
    argv += ["--dtype", plan.dtype] if plan.dtype else []
    argv += ["--out", str(staging), "--name", plan.name, "--prompts", str(prompts)]
    argv += ["--progress", str(progress_file), "--result", str(result_file)]
    argv += ["--replies-cache", str(RunFiles(plan.run_dir).exports_dir / ".policy-replies")]
    env = {**without_secrets(environ), "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    if plan.tinker_state and environ.get("TINKER_API_KEY"):
        env["TINKER_API_KEY"] = environ["TINKER_API_KEY"]
    log = work / "export.log"
    async with supervised("export", argv, log_path=log, env=env) as child:
        seen = 0
        deadline = time.monotonic() + EXPORT_TIMEOUT_S
        while child.running and time.monotonic() < deadline:
            seen = await _report(progress_file, seen, progress)
            await anyio.sleep(0.1)
        await _report(progress_file, seen, progress)
        code = await wait_exit(child, time.monotonic() + 1)
    result = _read(result_file)
    if "error" in result or code != 0:
        why = result.get("error") or last_error_line(tail_lines(log, 40)) or f"exit code {code} (see {log})"
        raise ExportError(f"the export of run {plan.run_id} ({plan.format}) failed: {why}")
    verification = result["verification"]
    written = [{**f, "path": str(plan.out / Path(f["path"]).relative_to(staging))} for f in result["files"]]
    command = load_command(plan, [Path(f["path"]) for f in written])
    if not verification["ok"]:
        _into_place(staging, plan.out)
        raise ExportError(
            f"the exported {plan.format} does not behave as the trained policy: its greedy replies matched on "
            f"{verification['matches']} of {verification['prompts']} prompts (needed {verification['required']}); "
            f"first difference: {verification['mismatches'][:1]}. The files are in {plan.out}"
        )
    card = write_card(dataclasses.replace(plan, out=staging), command, verification)
    files = [*written, *({"path": str(plan.out / p.name), "bytes": p.stat().st_size} for p in (card, staging / CURVE))]
    _into_place(staging, plan.out)
    return ExportOutcome(plan, str(result["dtype"]), files, command, verification, plan.out / card.name)


def _into_place(staging: Path, out: Path) -> None:
    """`staging` renamed to `out`, whatever `out` held before (a second export of the same checkpoint
    and format replaces the first) set aside first and removed after: no await, so no cancellation,
    between the two renames."""
    old = out.with_name(f".{out.name}.old")
    _discard(old)
    if out.exists() or out.is_symlink():
        os.rename(out, old)
    os.rename(staging, out)
    _discard(old)


def _discard(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        remove_tree(path)


async def _report(path: Path, seen: int, progress: ProgressFn | None) -> int:
    rows = read_jsonl(path)
    for row in rows[seen:]:
        if progress is not None:
            await progress(float(row.get("fraction", 0.0)), 1.0, str(row.get("stage", "")))
    return len(rows)


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


async def _push(plan: ExportPlan, repo: str, environ: Mapping[str, str], python: str, work: Path) -> str:
    result_file = work / "push.json"
    argv = [python, "-m", "tinker_atropos.export", "push", "--folder", str(plan.out), "--repo", repo]
    env = {**without_secrets(environ), "PYTHONUNBUFFERED": "1"}
    for name in ("HF_TOKEN", "HF_HUB_OFFLINE", "HF_ENDPOINT"):
        if environ.get(name):
            env[name] = environ[name]
    async with supervised("push", [*argv, "--result", str(result_file)], log_path=work / "push.log", env=env) as child:
        await wait_exit(child, time.monotonic() + PUSH_TIMEOUT_S)
    result = _read(result_file)
    if "url" not in result:
        raise ExportError(
            f"the export is in {plan.out}, but pushing it to {repo} failed: {result.get('error') or 'see push.log'}"
        )
    return str(result["url"])


def load_command(plan: ExportPlan, files: list[Path]) -> str:
    """How a user loads what was written."""
    folder = str(plan.out)
    if plan.format == "adapter":
        base = base_facts(plan.base_model).hub_id
        return (
            "from transformers import AutoModelForCausalLM; from peft import PeftModel\n"
            f'model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{base}"), "{folder}")'
        )
    if plan.format == "merged":
        return (
            f'from transformers import AutoModelForCausalLM\nmodel = AutoModelForCausalLM.from_pretrained("{folder}")'
        )
    gguf = next(f for f in files if f.suffix == ".gguf")
    return (
        f"cd {folder} && ollama create {plan.name} -f Modelfile && ollama run {plan.name}\n"
        f"llama-cli -m {gguf} -cnv\n"
        f'AutoModelForCausalLM.from_pretrained("{folder}", gguf_file="{gguf.name}")  # transformers'
    )
