"""`mcp-server-rl serve-model RUN_ID`: rl_serve_model from the shell, beside a running server (it reads the
run registry and writes only the served model's folder), with progress on stderr and the answer as JSON on
stdout. In the foreground by default: it serves until Ctrl-C or SIGTERM, then stops the model; `--detach`
leaves it serving, listed, re-adopted and stopped as the tool's are. `--list` and `--stop MODEL` answer as
rl_list_served_models and rl_stop_served_model do."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING

from rl_mcp import interrupts
from rl_mcp.errors import UserError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from rl_mcp.serving.manager import ServeManager
    from rl_mcp.serving.plan import ServePlan
    from rl_mcp.settings import Settings


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve-model", help="serve a run's trained model on a loopback OpenAI-compatible endpoint")
    serve.add_argument("run_id", nargs="?", help="the run whose weights to serve")
    serve.add_argument("--weights", help="best, final or a step number (default: best where evals exist, else final)")
    serve.add_argument("--port", type=int, help="the loopback port (default: a free one)")
    serve.add_argument("--detach", action="store_true", help="leave it serving when this command exits")
    other = serve.add_mutually_exclusive_group()
    other.add_argument("--list", action="store_true", help="list the served models instead")
    other.add_argument("--stop", metavar="MODEL", help="stop serving MODEL (<run_id>@<checkpoint>) instead")


def run(args: argparse.Namespace) -> int:
    from rl_mcp.runs.ports import PortReservations
    from rl_mcp.runs.preflight import unknown_run
    from rl_mcp.runs.store import RunRecord, RunStore
    from rl_mcp.serving.answers import served_list, stopped_answer
    from rl_mcp.serving.manager import ServeManager
    from rl_mcp.settings import Settings, SettingsError

    try:
        settings = Settings.from_env()
        store = RunStore(settings.home / "runs.sqlite")

        def lookup(run_id: str) -> RunRecord:
            rec = store.get(run_id)
            if rec is None:
                raise unknown_run(run_id, store.ids())
            return rec

        manager = ServeManager(settings, lookup, PortReservations(store.ports_in_use))
        if args.list:
            return _print(served_list(manager.list()))
        if args.stop:
            return _print(stopped_answer(interrupts.run(manager.stop, args.stop)))
        if not args.run_id:
            raise UserError("name the run to serve (mcp-server-rl serve-model RUN_ID), or pass --list or --stop MODEL")
        wanted: str | int | None = int(args.weights) if (args.weights or "").isdigit() else args.weights
        plan = manager.plan(args.run_id, wanted)
        return interrupts.run(_serve, settings, manager, plan, args)
    except interrupts.Interrupted:  # Ctrl-C or SIGTERM: the served model was stopped, as asked
        print("mcp-server-rl serve-model: stopped", file=sys.stderr)
        return 0
    except (UserError, SettingsError) as exc:
        print(f"mcp-server-rl serve-model: {exc}", file=sys.stderr)
        return 1


async def _serve(settings: Settings, manager: ServeManager, plan: ServePlan, args: argparse.Namespace) -> int:
    from rl_mcp.runtimes import ensure_runtime
    from rl_mcp.serving.answers import serve_answer

    async def note(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    await ensure_runtime("training", settings.environ, note)  # the inference server runs there
    served = await manager.serve(plan, port=args.port, report=note)
    _print(serve_answer(served))
    rec = served.record
    if args.detach or served.already_serving:
        await note(f"{rec.model} serves at {rec.url} (pid {rec.pid}): mcp-server-rl serve-model --stop {rec.model}")
        return 0
    await note(f"serving {rec.model} at {rec.url} (log {rec.log}); Ctrl-C stops it")
    code = await manager.foreground(rec)
    await note(f"{rec.model}'s inference server ended (exit {code}); its log: {rec.log}")
    return 1


def _print(answer: BaseModel) -> int:
    print(json.dumps(answer.model_dump(), indent=2), flush=True)
    return 0
