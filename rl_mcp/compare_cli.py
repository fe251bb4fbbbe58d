"""`mcp-server-rl compare RUN_ID RUN_ID ...`: rl_compare_runs from the shell, beside a running server (it
only reads the run registry and the runs' files): a table on stdout, or the tool's answer as JSON
with --json; --chart PATH writes the chart."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rl_mcp.errors import UserError
from rl_mcp.runs.compare_answers import compare_answer

if TYPE_CHECKING:  # imported where used: every `rl-mcp` command parses these arguments
    from rl_mcp.runs.compare import Comparison, RunFigures


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    compare = sub.add_parser("compare", help="compare 2 to 8 runs: config differences, figures, the best run")
    compare.add_argument("run_ids", nargs="+", metavar="RUN_ID")
    compare.add_argument("--json", action="store_true", help="print rl_compare_runs' answer as JSON")
    compare.add_argument("--chart", type=Path, help="write the reward and eval chart here (PNG)")


def run(args: argparse.Namespace) -> int:
    from rl_mcp.runs.compare import check_run_ids, compare_runs
    from rl_mcp.runs.metrics import MetricsCache
    from rl_mcp.runs.store import RunStore
    from rl_mcp.settings import Settings, SettingsError

    try:
        settings = Settings.from_env()
        check_run_ids(args.run_ids)
        store = RunStore(settings.home / "runs.sqlite")
        found = {run_id: store.get(run_id) for run_id in args.run_ids}
        unknown = [run_id for run_id, rec in found.items() if rec is None]
        if unknown:
            known = ", ".join(store.ids()[:20]) or "none yet"
            names = ", ".join(map(repr, unknown))
            raise UserError(f"unknown run id(s) {names} in {settings.home}; known runs: {known}")
        records = [rec for rec in found.values() if rec is not None]
        price = settings.profile.usd_per_million_tokens
        comparison = compare_runs(records, MetricsCache(), usd_per_million_tokens=price)
        if args.chart is not None:
            args.chart.write_bytes(comparison.chart_png())
    except (UserError, SettingsError) as exc:
        print(f"mcp-server-rl compare: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"mcp-server-rl compare: cannot write the chart to {args.chart}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(compare_answer(comparison).model_dump(mode="json"), indent=2))
    else:
        print(table(comparison, args.chart))
    return 0


COLUMNS = (
    "run",
    "status",
    "steps",
    "reward first->last",
    "gain/min",
    "eval 0->last",
    "best eval",
    "train",
    "wall",
    "tokens",
    "cost",
)


def table(comparison: Comparison, chart: Path | None) -> str:
    """The comparison as text: one row per run, the differing config fields, the best runs."""
    rows = [list(COLUMNS), *(_row(r) for r in comparison.runs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines += ["", "config differences:" if comparison.config_differences else "config differences: none"]
    for diff in comparison.config_differences:
        lines.append(f"  {diff.field}: " + "  ".join(f"{run_id}={json.dumps(v)}" for run_id, v in diff.values.items()))
    lines += [
        "",
        f"best by held-out eval: {comparison.best_by_eval or '- (no evaluation of trained weights)'}",
        f"best by reward per minute: {comparison.best_by_reward_per_minute or '- (fewer than 2 steps)'}",
        *comparison.notes,
    ]
    if chart is not None:
        lines.append(f"chart: {chart}")
    return "\n".join(lines)


def _row(r: RunFigures) -> list[str]:
    best = f"{_num(r.eval_best)}@{r.eval_best_step}" if r.eval_best is not None else "-"
    cost = "-" if r.cost_usd is None else f"${r.cost_usd:,.2f}"
    return [
        r.run_id,
        r.status,
        f"{r.steps_completed}/{r.total_steps}",
        f"{_num(r.reward_first)}->{_num(r.reward_last)}",
        "-" if r.reward_per_minute is None else f"{r.reward_per_minute:+.4f}",
        f"{_num(r.eval_before)}->{_num(r.eval_last)}",
        best,
        f"{r.training_seconds:.0f}s",
        f"{r.wall_seconds:.0f}s",
        f"{r.tokens_trained:,}",
        cost,
    ]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
