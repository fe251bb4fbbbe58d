"""Does the supervised stage make a cold model learn agent work? SmolLM2-135M-Instruct, side by side
at the same wall-clock budget (the stage included), through the MCP tools as an agent:

- `rl`: RL with one demonstration per group (what the product did before the stage);
- `sft`: a supervised stage from the environment's demonstrations, then RL on the same adapter;
- `teacher`: a supervised stage from a teacher's filtered rollouts (the `sft` arm's final adapter,
  served by the product: "distill run A into run B"), then RL; it runs after `sft`.

On `mcp:time` (bench/mcp_tools.py's tasks and server) or `tool_calculator`. Each arm prints the
held-out accuracy and tool-call share before training, after the stage, and at each `--at` minute.

    .venv/bin/python bench/sft.py [--environment mcp:time|tool_calculator] [--minutes 30]
                                  [--arms rl,sft,teacher] [--at 10,20,30]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from learning import train_through_mcp
from mcp_tools import EDITS as MCP_EDITS
from mcp_tools import SERVER, tasks

from rl_mcp import interrupts
from tinker_atropos.run_files import read_jsonl

CALCULATOR_EDITS: dict[str, Any] = {"group_size": 8, "batch_size": 16, "steps_per_eval": 5, "eval_size": 16}
STAGE: dict[str, Any] = {"items": 48, "epochs": 2, "batch_size": 8, "learning_rate": 5e-4, "min_score": 1.0}


def arm_edits(arm: str, base: dict[str, Any], teacher_adapter: Path | None) -> dict[str, Any]:
    if arm == "rl":
        return {**base, "demonstrations_per_group": 1}
    if arm == "sft":
        return {**base, "demonstrations_per_group": 0, "sft": {"sources": ["demonstrations"], **STAGE}}
    if teacher_adapter is None:
        raise SystemExit("the teacher arm needs the sft arm's adapter: list sft before teacher in --arms")
    teacher = {"adapter": str(teacher_adapter), "samples_per_item": 4, "keep_per_item": 1, "temperature": 0.7}
    source = {"sources": ["teacher"], "teacher": teacher, **STAGE, "items": 32, "min_score": 0.5}
    return {**base, "demonstrations_per_group": 0, "sft": source}


def home_for(environment: str, train_items: int | None = None) -> Path:
    """A server home; on `mcp:time`, its tasks file keeps the first `train_items` training tasks (all 64
    by default) and the same 16 held-out ones."""
    home = Path(tempfile.mkdtemp(prefix="rl-mcp-sft-bench-")).resolve()
    if environment == "mcp:time":
        (home / "mcp-tasks").mkdir(parents=True)
        servers = {"mcpServers": {"time": {"command": str(SERVER), "args": ["--local-timezone", "UTC"]}}}
        (home / "tool-servers.json").write_text(json.dumps(servers))
        train = [t for t in tasks() if t["split"] == "train"][:train_items]
        kept = train + [t for t in tasks() if t["split"] == "eval"]
        (home / "mcp-tasks" / "time.jsonl").write_text("".join(json.dumps(t) + "\n" for t in kept))
    return home


def figures(run_dir: Path, started: float, marks: list[float]) -> list[str]:
    """Held-out accuracy and tool-call share: before, after the stage, and at each mark (minutes)."""
    evals = read_jsonl(run_dir / "eval.jsonl")
    if not evals:
        return ["no evaluation"]

    def said(row: dict[str, Any]) -> str:
        share = row.get("eval_tool_call_share")
        return f"accuracy {row['eval_accuracy']:.3f} tool-call share {share if share is None else round(share, 3)}"

    stage = [e for e in evals if e.get("stage") == "sft"]
    lines = [f"before        {said(evals[0])}"]
    if len(stage) > 1:
        lines.append(f"after stage   {said(stage[-1])} ({(stage[-1]['time'] - started) / 60:.1f} min)")
    for mark in marks:
        seen = [e for e in evals if e["time"] - started <= mark * 60]
        lines.append(f"at {mark:>4g} min   {said(seen[-1]) if seen else '-'}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--environment", default="mcp:time", choices=["mcp:time", "tool_calculator"])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--arms", default="rl,sft,teacher")
    ap.add_argument("--at", default="10,20,30", help="minutes at which to read the held-out evaluation")
    a = ap.parse_args()
    if a.environment == "mcp:time" and not SERVER.exists():
        print(f"{SERVER} is missing: run `make mcp-servers`")
        return 1
    base = MCP_EDITS if a.environment == "mcp:time" else CALCULATOR_EDITS
    marks = [float(m) for m in a.at.split(",") if m]
    adapter: Path | None = None
    report: dict[str, list[str]] = {}
    for arm in a.arms.split(","):
        started = time.time()
        run_dir, final = interrupts.run(
            train_through_mcp, a.minutes, home_for(a.environment), a.environment, arm_edits(arm, base, adapter)
        )
        adapter = final if arm == "sft" else adapter
        report[arm] = figures(run_dir, started, marks)
        print(f"== {arm}: {run_dir}", *report[arm], sep="\n  ", flush=True)
    print(f"\n{a.environment}, {a.minutes:g} min an arm:")
    for arm, lines in report.items():
        print(f"{arm:>8}: " + " | ".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
