"""How the product drives hermes-agent 0.19 for a training episode, measured: `hermes -z` (one process
per episode) against `hermes acp` (one long-lived process, sessions over ACP's JSON-RPC on stdio).

For each way, the seconds from starting Hermes to its first chat completion reaching the model (caught
on a loopback port, as `hermes_harness/prompt_fit.py` catches it), over a few trials: what an episode
pays before its model works. ACP's figure is split into the process's start (initialize), a session's
start (session/new) and the prompt's way to the model (session/prompt).

    .venv/bin/python bench/hermes_harness.py [--trials 3]

Figures go in bench/README.md with the machine named; docs/hermes.md says which way the product took.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tinker-atropos"))

from tinker_atropos.hermes_harness.hermes_config import episode_config, write_home  # noqa: E402
from tinker_atropos.hermes_harness.prompt_fit import capture_first_request  # noqa: E402

HERMES = ROOT / ".runtimes" / "hermes" / "bin" / "hermes"
PROMPT = "Create the file greeting.txt containing exactly: hello"
TOOLSETS = "terminal,file"


def home_for(url: str, folder: Path) -> Path:
    config = episode_config("m", url, "episode-bench", max_turns=2, temperature=0.0, max_tokens=16)
    return write_home(folder, config)


async def headless(url: str, folder: Path, cwd: Path) -> None:
    """`hermes -z`: one process, its prompt on the command line."""
    env = {"HERMES_HOME": str(home_for(url, folder)), "NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    proc = await asyncio.create_subprocess_exec(
        str(HERMES), "-t", TOOLSETS, "-z", PROMPT, cwd=cwd, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


class Acp:
    """A minimal ACP client over a `hermes acp` child's stdio (newline-delimited JSON-RPC)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc, self.next_id = proc, 0

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        ask = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write((json.dumps(ask) + "\n").encode())
        await self.proc.stdin.drain()
        while True:
            line = await self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"hermes acp ended during {method}")
            said = json.loads(line)
            if said.get("id") == self.next_id and "method" not in said:
                if "error" in said:
                    raise RuntimeError(f"{method}: {said['error']}")
                return dict(said.get("result") or {})


async def over_acp(url: str, folder: Path, cwd: Path, marks: dict[str, float]) -> None:
    env = {"HERMES_HOME": str(home_for(url, folder)), "NO_COLOR": "1", "PATH": "/usr/bin:/bin", "HOME": str(cwd)}
    proc = await asyncio.create_subprocess_exec(
        str(HERMES), "acp", cwd=cwd, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    client = Acp(proc)
    try:
        await client.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})
        marks["initialize"] = time.monotonic()
        session = await client.call("session/new", {"cwd": str(cwd), "mcpServers": []})
        marks["session/new"] = time.monotonic()
        await client.call(
            "session/prompt", {"sessionId": session["sessionId"], "prompt": [{"type": "text", "text": PROMPT}]}
        )
    finally:
        proc.kill()
        await proc.wait()


async def trial(way: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        folder, cwd = Path(tmp) / "home", Path(tmp) / "work"
        cwd.mkdir()
        marks: dict[str, float] = {}
        started = time.monotonic()
        if way == "-z":
            await capture_first_request(lambda url: headless(url, folder, cwd))
        else:
            await capture_first_request(lambda url: over_acp(url, folder, cwd, marks))
        first = time.monotonic() - started
        return {"first_request_s": first, **{k: v - started for k, v in marks.items()}}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    for way in ("-z", "acp"):
        runs = [await trial(way) for _ in range(args.trials)]
        keys = runs[0].keys()
        said = ", ".join(f"{k} {statistics.median(r[k] for r in runs):.2f} s" for k in keys)
        print(f"hermes {way}: median of {args.trials}: {said}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
