"""Does a local model learn to use an MCP tool server? SmolLM2-135M-Instruct on `mcp:time`
(PyPI's mcp-server-time, `make mcp-servers`) for M minutes, through the MCP tools as an agent
(mcp-server-rl serve over stdio, --profile smollm2): every tool call a real `tools/call`.

The tasks are time-zone conversions of our own ("It is 09:30 in UTC. What time is it in Tokyo?"),
to zones without daylight saving so the answer is fixed, each checked by `called`: convert_time
with the right source, time and target. One rollout per group is demonstrated (the call, then the
answer): untrained SmolLM2 writes no tool call by itself. 16 tasks are held out (`split: eval`).

    .venv/bin/python bench/mcp_tools.py [--minutes 20] [--set FIELD=JSON ...]

The last line: `held-out accuracy before X after Y (+Z points), tool-call share A -> B in M min`.
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path
from typing import Any

from learning import overrides, read_run, step_figures, train_through_mcp

from rl_mcp import interrupts

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / ".venv-mcp-servers" / "bin" / "mcp-server-time"
ZONES = {  # no daylight saving: the offset, in minutes, holds all year
    "Tokyo": ("Asia/Tokyo", 540),
    "Kolkata": ("Asia/Kolkata", 330),
    "Kathmandu": ("Asia/Kathmandu", 345),
    "Dubai": ("Asia/Dubai", 240),
    "Shanghai": ("Asia/Shanghai", 480),
    "Nairobi": ("Africa/Nairobi", 180),
    "Karachi": ("Asia/Karachi", 300),
    "Dhaka": ("Asia/Dhaka", 360),
    "Jakarta": ("Asia/Jakarta", 420),
    "Honolulu": ("Pacific/Honolulu", -600),
    "Phoenix": ("America/Phoenix", -420),
    "Bogota": ("America/Bogota", -300),
}
EDITS: dict[str, Any] = {
    "demonstrations_per_group": 1,
    "group_size": 8,
    "batch_size": 16,
    "max_token_length": 1024,
    "max_turn_tokens": 64,
    "max_agent_turns": 2,
    "steps_per_eval": 5,
    "max_concurrent_sessions": 4,
}


def tasks(n_train: int = 64, n_eval: int = 16, seed: int = 0) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n_train + n_eval):
        city = rng.choice(sorted(ZONES))
        zone, offset = ZONES[city]
        minutes = rng.randrange(0, 24 * 60, 30)
        local = (minutes + offset) % (24 * 60)
        when, answer = f"{minutes // 60:02d}:{minutes % 60:02d}", f"{local // 60:02d}:{local % 60:02d}"
        out.append(
            {
                "id": f"t{i}",
                "prompt": f"It is {when} in UTC. What time is it in {city}?",
                "answer": f"It is {answer} in {city}.",
                "check": {
                    "called": "convert_time",
                    "arguments": {"source_timezone": "UTC", "time": when, "target_timezone": zone},
                },
                "split": "eval" if i >= n_train else "train",
            }
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--home", type=Path, default=None, help="state dir of the bench's server")
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", help="override a setting")
    a = ap.parse_args()
    if not SERVER.exists():
        print(f"{SERVER} is missing: run `make mcp-servers`")
        return 1
    home = (a.home or Path(tempfile.mkdtemp(prefix="rl-mcp-mcp-bench-"))).resolve()
    (home / "mcp-tasks").mkdir(parents=True, exist_ok=True)
    servers = {"mcpServers": {"time": {"command": str(SERVER), "args": ["--local-timezone", "UTC"]}}}
    (home / "tool-servers.json").write_text(json.dumps(servers))  # the default path under RL_MCP_HOME
    (home / "mcp-tasks" / "time.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks()))
    edits = {**EDITS, **overrides(a.set)}
    run_dir, _ = interrupts.run(train_through_mcp, a.minutes, home, "mcp:time", edits)
    metrics, evals = read_run(run_dir)
    for e in evals:
        print(
            f"step {e['step']:>4}: accuracy {e['eval_accuracy']:.3f}  tool-call share {e['eval_tool_call_share']:.3f}  "
            f"reward {e['eval_reward_mean']:.3f}"
        )
    figures = step_figures(metrics)
    print(f"{figures['steps']} steps, median step {figures['median_step_seconds']} s, run {run_dir}")
    if len(evals) < 2:
        print(f"no eval after step {evals[0]['step'] if evals else '-'} within {a.minutes:g} min: lower steps_per_eval")
        return 1
    before, after = evals[0], evals[-1]
    gain = 100 * (after["eval_accuracy"] - before["eval_accuracy"])
    share = f"{before['eval_tool_call_share']:.3f} -> {after['eval_tool_call_share']:.3f}"
    print(
        f"held-out accuracy before {before['eval_accuracy']:.3f} after {after['eval_accuracy']:.3f} "
        f"({gain:+.1f} points), tool-call share {share} in {a.minutes:g} min"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
