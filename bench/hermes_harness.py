"""Training inside hermes-agent 0.19, measured.

`startup`: how the product drives Hermes for an episode: `hermes -z` (one process per episode) against
`hermes acp` (one long-lived process, sessions over ACP's JSON-RPC on stdio). For each, the seconds from
starting Hermes to its first chat completion reaching the model (caught on a loopback port, as
`hermes_harness/prompt_fit.py` catches it): what an episode pays before its model works. ACP's figure is
split into the process's start (initialize) and a session's start (session/new).

`learn`: SmolLM2 on a generated task set (write a named file with a given word), held-out items run by
Hermes itself. Demonstrations are Hermes sessions of the training items, recorded by the real Hermes
against a scripted expert and exported (`hermes sessions export --format jsonl`); the run's supervised
stage reads them (`sources: [hermes_sessions]`), then RL runs in Hermes. Reported: held-out success of
the base model, after the stage and after RL, the run's wall and CPU seconds, seconds per RL step,
episodes per minute.

    .venv/bin/python bench/hermes_harness.py startup [--trials 3]
    .venv/bin/python bench/hermes_harness.py learn [--train 8] [--held-out 8] [--steps 4]

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


async def startup(trials: int) -> None:
    for way in ("-z", "acp"):
        runs = [await trial(way) for _ in range(trials)]
        keys = runs[0].keys()
        said = ", ".join(f"{k} {statistics.median(r[k] for r in runs):.2f} s" for k in keys)
        print(f"hermes {way}: median of {trials}: {said}", flush=True)


WORDS = [
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "grove",
    "haven",
    "iris",
    "jolly",
    "koala",
    "lemon",
    "mango",
    "noble",
    "olive",
    "pearl",
    "quill",
    "raven",
    "sable",
    "tulip",
    "umber",
    "vivid",
    "willow",
    "zebra",
]


def task_items(n_train: int, n_held: int) -> list[dict[str, str]]:
    items = []
    for k in range(n_train + n_held):
        name, word = WORDS[k % len(WORDS)], WORDS[(k * 7 + 3) % len(WORDS)]
        items.append(
            {
                "id": f"{name}-{k}",
                "prompt": f"Create the file {name}.txt containing exactly: {word}",
                "check": f'test "$(cat {name}.txt)" = {word}',
                "split": "train" if k < n_train else "held_out",
                "file": f"{name}.txt",
                "word": word,
            }
        )
    return items


def record_sessions(items: list[dict[str, str]], root: Path) -> Path:
    """The training items done by the real Hermes against a scripted expert (write_file, then a word),
    in one HERMES_HOME, exported as Hermes exports its sessions."""
    sys.path.insert(0, str(ROOT / "tests"))
    import subprocess

    from loopback_http import loopback_http
    from scripted_chat import call, scripted_handler

    from tinker_atropos.hermes_harness.hermes_config import provider_config

    script = {
        i["prompt"]: [{"tool_calls": [call("write_file", path=i["file"], content=i["word"])]}, {"content": "Done."}]
        for i in items
    }
    home = root / "demo-home"
    with loopback_http(scripted_handler(script)) as url:
        write_home(home, provider_config("expert", f"{url}/v1", "x", {"temperature": 0}))
        env = {"HERMES_HOME": str(home), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
        for i in items:
            cwd = root / "demo-work" / i["id"]
            cwd.mkdir(parents=True)
            argv = [str(HERMES), "-t", "file", "-z", i["prompt"]]
            done = subprocess.run(
                argv, cwd=cwd, env={**env, "HOME": str(cwd)}, capture_output=True, text=True, timeout=300
            )
            assert (cwd / i["file"]).read_text().strip() == i["word"], (done.stdout[-500:], done.stderr[-500:])
    out = root / "sessions.jsonl"
    subprocess.run([str(HERMES), "sessions", "export", str(out), "--format", "jsonl"], env=env, check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    return out


async def learn(n_train: int, n_held: int, steps: int) -> None:
    import psutil
    import yaml
    from mcp import Client

    sys.path.insert(0, str(ROOT / "tests"))
    from test_runs_mcp import call, environ, serving, wait_status

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        items = task_items(n_train, n_held)
        folder = root / "envs" / "write_word"
        folder.mkdir(parents=True)
        kept = [{k: i[k] for k in ("id", "prompt", "check", "split")} for i in items]
        task_set = {"description": "write a named file with a given word", "toolsets": ["file"], "max_turns": 3,
                    "episode_timeout_s": 300, "items": kept}  # fmt: skip
        (folder / "hermes-tasks.yaml").write_text(yaml.safe_dump(task_set, sort_keys=False))
        started = time.monotonic()
        sessions = record_sessions([i for i in items if i["split"] == "train"], root)
        print(f"recorded {n_train} demonstration sessions in {time.monotonic() - started:.0f} s", flush=True)
        home = root / "home"
        env = environ(home, RL_MCP_RUNTIMES=str(ROOT / ".runtimes"), RL_MCP_PROFILE="smollm2",
                      RL_MCP_ENV_DIRS=str(root / "envs"))  # fmt: skip
        edits = {
            "group_size": 4, "batch_size": 8, "total_steps": steps, "max_turn_tokens": 64, "steps_per_eval": steps,
            "eval_before_training": True, "eval_at_end": True,
            "sft": {"sources": ["hermes_sessions"], "sessions_file": str(sessions), "epochs": 2, "batch_size": 4,
                    "learning_rate": 1e-3, "eval_every": 0},
        }  # fmt: skip
        async with serving(env) as (_, server), Client(server) as client:
            await call(client, "rl_select_environment", name="hermes-tasks:write_word")
            for field, value in edits.items():
                await call(client, "rl_edit_config", field=field, value=value)
            run_id = (await call(client, "rl_start_training"))["run_id"]
            t0, cpu = time.monotonic(), 0.0
            procs: dict[int, psutil.Process] = {}
            while True:
                status = await call(client, "rl_check_status", run_id=run_id)
                for p in status.get("processes") or []:
                    try:
                        proc = procs.setdefault(p["pid"], psutil.Process(p["pid"]))
                        times = proc.cpu_times()
                        proc.info = {"cpu": times.user + times.system + times.children_user + times.children_system}
                    except psutil.Error:
                        pass
                if status["status"] in ("completed", "failed", "stopped"):
                    break
                await asyncio.sleep(5)
            cpu = sum(getattr(p, "info", {}).get("cpu", 0.0) for p in procs.values())
            wall = time.monotonic() - t0
            done = await wait_status(client, run_id, {"completed", "failed", "stopped"}, timeout=10)
        run_dir = home / "runs" / run_id
        print(f"run {done['status']} in {wall:.0f} s wall, {cpu:.0f} CPU-s of its processes (children included)")
        for name in ("sft/steps.jsonl", "eval.jsonl", "metrics.jsonl"):
            path = run_dir / name
            if path.exists():
                for line in path.read_text().splitlines():
                    row = json.loads(line)
                    keys = ("step", "stage", "eval_accuracy", "eval_tool_call_share", "loss", "reward_mean",
                            "step_seconds", "seconds", "num_items")  # fmt: skip
                    print(name, {k: row[k] for k in keys if k in row})


async def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="what")  # none: startup (what `make bench` runs)
    sub.add_parser("startup").add_argument("--trials", type=int, default=3)
    taught = sub.add_parser("learn")
    taught.add_argument("--train", type=int, default=8)
    taught.add_argument("--held-out", type=int, default=8)
    taught.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    if args.what in (None, "startup"):
        await startup(getattr(args, "trials", 3))
    else:
        await learn(args.train, args.held_out, args.steps)


if __name__ == "__main__":
    asyncio.run(main())
