"""`mcp-server-rl export RUN_ID`: rl_export_model from the shell, beside a running server (it only reads
the run registry), with progress on stderr and the answer as JSON on stdout."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rl_mcp import interrupts
from rl_mcp.errors import UserError
from rl_mcp.export.answers import export_answer


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    export = sub.add_parser("export", help="export a run's trained model (adapter, merged, gguf)")
    export.add_argument("run_id")
    export.add_argument("--format", choices=("adapter", "merged", "gguf"), default="merged")
    export.add_argument("--checkpoint", help="best, final or a step number (default: best where evals exist)")
    export.add_argument("--dtype", help="merged: float32 | bfloat16 | float16; gguf: f16 | q8_0")
    export.add_argument("--out", type=Path, help="output folder (default: runs/<id>/exports/...)")
    export.add_argument("--hub-repo", help="also push the folder to this Hugging Face repo (needs HF_TOKEN)")


def run(args: argparse.Namespace) -> int:
    from rl_mcp.export.plan import plan_export
    from rl_mcp.export.runner import run_export
    from rl_mcp.runs.store import RunStore
    from rl_mcp.runtimes import ensure_runtime
    from rl_mcp.settings import Settings, SettingsError

    try:
        settings = Settings.from_env()
        rec = RunStore(settings.home / "runs.sqlite").get(args.run_id)
        if rec is None:
            raise UserError(
                f"unknown run id {args.run_id!r} in {settings.home} (mcp-server-rl serve lists runs: rl_list_runs)"
            )
        checkpoint: str | int | None = int(args.checkpoint) if (args.checkpoint or "").isdigit() else args.checkpoint
        plan = plan_export(rec, checkpoint, args.format, args.dtype, args.out)

        async def progress(done: float, total: float, message: str) -> None:
            print(f"[{100 * done / total:5.1f}%] {message}", file=sys.stderr, flush=True)

        async def export() -> Any:
            async def note(message: str) -> None:
                print(message, file=sys.stderr, flush=True)

            await ensure_runtime("training", settings.environ, note)  # the export's child runs there
            return await run_export(
                plan, environ=settings.environ, python=settings.python, hub_repo=args.hub_repo, progress=progress
            )

        outcome = interrupts.run(export)  # a signal stops the export child, then exits 128 + the signal
    except (UserError, SettingsError) as exc:
        print(f"mcp-server-rl export: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(export_answer(outcome).model_dump(), indent=2))
    return 0
