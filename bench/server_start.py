"""Server start-up and tool latency.

1. Cold start: seconds from spawning `python -m rl_mcp serve` (stdio) to the tools/list answer,
   printed beside a bare `python -c pass` and `python -c "import atroposlib.envs.base"` (what the
   server would pay on every start if it imported environment code itself).
   Also beside importing the mcp SDK alone: the floor for any server built on it.
2. Read-only tool calls over the SDK's in-memory client: p50 / p99 of rl_list_environments and
   rl_get_current_config (environment selected and introspected beforehand).

Targets: cold start <= 1.5 s; p50 <= 5 ms.  Usage: python bench/server_start.py [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLD_START_TARGET_S = 1.5
P50_TARGET_MS = 5.0


def _messages() -> bytes:
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"},
        },
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    tools = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    return b"".join(json.dumps(m).encode() + b"\n" for m in (init, initialized, tools))


def cold_start(env: dict[str, str]) -> tuple[float, float]:
    """Spawn the server, send initialize + tools/list at once, stop the clock at the tools answer.

    Returns (wall seconds, CPU seconds of the server process): on a shared machine the CPU time
    says what the start costs when the cores are free."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rl_mcp", "serve", "--log-level", "WARNING"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
    )
    assert proc.stdin and proc.stdout
    proc.stdin.write(_messages())
    proc.stdin.flush()
    elapsed = None
    for line in proc.stdout:
        message = json.loads(line)
        if message.get("id") == 2:
            elapsed = time.perf_counter() - started
            assert len(message["result"]["tools"]) >= 4, message
            break
    proc.stdin.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if elapsed is None:
        raise RuntimeError("the server exited before answering tools/list")
    return elapsed, usage.ru_utime + usage.ru_stime


def python_run(code: str, env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
    return time.perf_counter() - started


async def tool_latencies(calls: int) -> dict[str, list[float]]:
    from mcp import Client

    from rl_mcp.app import open_app
    from rl_mcp.mcp_api.server import build_server
    from rl_mcp.settings import Settings

    async with open_app(Settings.from_env(profile="local")) as app:
        server = build_server(app)
        async with Client(server) as client:
            selected = await client.call_tool("rl_select_environment", {"name": "letter_repeat"})
            assert not selected.is_error, selected.content
            out: dict[str, list[float]] = {}
            for tool in ("rl_list_environments", "rl_get_current_config"):
                # Through the client (what an agent sees: includes the SDK client's jsonschema check
                # of structuredContent against outputSchema) and server-side only, side by side.
                for label, call in ((tool, client.call_tool), (f"{tool} (server only)", server.call_tool)):
                    for _ in range(20):  # warm-up
                        await call(tool, {})
                    samples = []
                    for _ in range(calls):
                        t0 = time.perf_counter()
                        result = await call(tool, {})
                        samples.append((time.perf_counter() - t0) * 1000)
                        assert not result.is_error
                    out[label] = samples
        app.task_group.cancel_scope.cancel()
    return out


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="cold starts to time (median reported)")
    parser.add_argument("--calls", type=int, default=300, help="tool calls per tool")
    args = parser.parse_args()

    home = tempfile.mkdtemp(prefix="rl-mcp-bench-")
    os.environ["RL_MCP_HOME"] = home
    env = {**os.environ, "RL_MCP_HOME": home, "RL_MCP_PROFILE": "local"}

    cold_start(env)  # the first start compiles bytecode; not what a user sees twice
    runs = [cold_start(env) for _ in range(args.runs)]
    starts = [wall for wall, _ in runs]
    bare = statistics.median(python_run("pass", env) for _ in range(args.runs))
    sdk = statistics.median(python_run("import mcp.server.mcpserver, mcp.server.stdio", env) for _ in range(args.runs))
    atropos = statistics.median(python_run("import atroposlib.envs.base", env) for _ in range(max(1, args.runs // 2)))
    start = statistics.median(starts)
    cpu = statistics.median(c for _, c in runs)
    print(
        f"cold start to tools/list (stdio), median of {args.runs}: {start:.3f} s wall (min {min(starts):.3f} s), "
        f"{cpu:.3f} s CPU of the server process"
    )
    print(f"  python -c pass:                           {bare:.3f} s")
    print(f"  importing the mcp SDK alone:              {sdk:.3f} s  ({sdk / start:.0%} of the server's start)")
    print(
        f"  python -c 'import atroposlib.envs.base':  {atropos:.3f} s  "
        f"(the server starts {atropos / start:.1f}x faster than importing atroposlib alone)"
    )
    print(f"  target <= {COLD_START_TARGET_S} s: {'met' if start <= COLD_START_TARGET_S else 'MISSED'}")

    from rl_mcp import interrupts

    latencies = interrupts.run(tool_latencies, args.calls)
    met = True
    for tool, samples in latencies.items():
        p50, p99 = percentile(samples, 0.50), percentile(samples, 0.99)
        if "server only" not in tool:
            met &= p50 <= P50_TARGET_MS
        print(f"{tool:<38} {len(samples)} calls: p50 {p50:.2f} ms  p99 {p99:.2f} ms")
    print(f"  target p50 <= {P50_TARGET_MS} ms through the client: {'met' if met else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
