"""Does every rollout teach? The draw of training items against today's order, side by side: two runs
one after the other on one machine (two at once would share its 2 cores; before the stage gave its
steps' freed memory back, bench/step_memory.py, they did not fit in 24 GiB either), the same
wall-clock budget from rl_start_training (the stage included), each a supervised stage from the
environment's demonstrations then RL (bench/sft.py's `sft` arm), through the MCP tools as an agent:

- `today`: `item_window: 0`, every training item in turn, as the product drew them before the draw;
- `draw`: the draw (solved items retired, unsolved ones deferred; the run ends once every item is
  retired), each group sampled whole (`probe_replies: 0`);
- `probe`: the product's defaults: the draw, and a group whose tie is likely begun with a probe of 2
  replies that stops it when they tie (tinker_atropos.item_draw.probe);
- `draw1` (only when `--arms` names it): the draw deciding on each item's last group alone
  (`item_window: 1`).

For each arm: the share of the rollouts' reply tokens that went into groups atroposlib dropped as
tied (items.json), the RL steps made, and the held-out accuracy (and tool-call share) at each `--at`
minute. On `mcp:time` (bench/mcp_tools.py's tasks and server) or `tool_calculator`.

Named item_signal.py, not signal.py: a script in bench/ has bench/ first on its path, and a signal.py
there would stand in for the standard library's `signal` (asyncio imports it).

    .venv/bin/python bench/item_signal.py [--environment mcp:time|tool_calculator] [--minutes 20] [--at 10,20]
                                          [--train-items N] [--arms today,draw,probe,draw1]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from learning import train_through_mcp
from mcp_tools import EDITS as MCP_EDITS
from mcp_tools import SERVER
from sft import CALCULATOR_EDITS, arm_edits, figures, home_for

from rl_mcp import interrupts
from tinker_atropos.run_files import RunFiles, read_jsonl

ARMS: dict[str, dict[str, Any]] = {
    "today": {"item_window": 0},
    "draw": {"probe_replies": 0},
    "probe": {},
    "draw1": {"item_window": 1, "probe_replies": 0},
}


def signal_figures(run_dir: Path, started: float) -> str:
    """The tied share of reply tokens (and the tokens themselves: a run that ends sooner spends fewer),
    the groups that tied, the RL steps made and when the run ended."""
    files = RunFiles(run_dir)
    ended = f"; ended at {(files.result.stat().st_mtime - started) / 60:.1f} min" if files.result.exists() else ""
    items = json.loads(files.items.read_text()) if files.items.exists() else {}
    steps = len(read_jsonl(files.metrics))
    if not items.get("reply_tokens"):
        return f"{steps} RL steps, no group scored"
    share = items["tied_reply_tokens"] / items["reply_tokens"]
    ties = items["ties"]
    return (
        f"{share:.0%} of reply tokens in tied groups ({items['tied_reply_tokens']} of {items['reply_tokens']}; "
        f"{sum(ties.values())} of {items['groups']} groups tied: "
        f"{ties['top']} at the top, {ties['zero']} at zero); {steps} RL steps; items {items['active']} active, "
        f"{items['retired']} retired, {items['deferred']} deferred; "
        f"{items.get('probes_stopped', 0)} of {items.get('probes', 0)} probes stopped their group"
        + ("; every item retired: the run completed" if items.get("all_retired") else "")
        + ended
    )


async def the_arms(
    environment: str, minutes: float, marks: list[float], train_items: int | None, arms: list[str]
) -> dict[str, list[str]]:
    base = {**(MCP_EDITS if environment == "mcp:time" else CALCULATOR_EDITS), **arm_edits("sft", {}, None)}
    if environment == "tool_calculator" and train_items:
        base["num_train_items"] = train_items  # its problems are drawn from the seed: the held-out ones change too
    report: dict[str, list[str]] = {}

    async def arm(name: str, edits: dict[str, Any]) -> None:
        started = time.time()
        run_dir, _ = await train_through_mcp(
            minutes, home_for(environment, train_items), environment, {**base, **edits}, may_complete=True
        )
        report[name] = [signal_figures(run_dir, started), *figures(run_dir, started, marks)]
        print(f"== {name}: {run_dir}", *report[name], sep="\n  ", flush=True)

    for name in arms:
        await arm(name, ARMS[name])
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--environment", default="mcp:time", choices=["mcp:time", "tool_calculator"])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--at", default="10,20", help="minutes at which to read the held-out evaluation")
    ap.add_argument(
        "--train-items",
        type=int,
        default=None,
        help="keep this many training items (mcp:time: of its 64 tasks; tool_calculator: num_train_items), "
        "so a budget spans several passes",
    )
    ap.add_argument("--arms", default="today,probe", help=f"which of {', '.join(ARMS)}, in this order")
    a = ap.parse_args()
    arms = a.arms.split(",")
    if unknown := [name for name in arms if name not in ARMS]:
        ap.error(f"unknown arm(s) {', '.join(unknown)}: the arms are {', '.join(ARMS)}")
    if a.environment == "mcp:time" and not SERVER.exists():
        print(f"{SERVER} is missing: run `make mcp-servers`")
        return 1
    marks = [float(m) for m in a.at.split(",") if m]
    report = interrupts.run(the_arms, a.environment, a.minutes, marks, a.train_items, arms)
    print(f"\n{a.environment}, {a.minutes:g} min an arm:")
    for name, lines in sorted(report.items()):
        print(f"{name:>6}: " + " | ".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
