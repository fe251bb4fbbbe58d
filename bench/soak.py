"""Load, faults, bad input and auth against real `mcp-server-rl serve` processes, measured (#89).

    .venv/bin/python bench/soak.py [--parts load,bound,faults,input,auth] [--levels 1 8 32 64]
        [--sse-levels 1 8 32] [--seconds 10] [--trials 8] [--examples 40] [--json OUT]

1. load: N MCP clients over Streamable HTTP (then over SSE, on a server of that transport) call the read
   tools and read a log resource they subscribe to, while a run of that server trains: p50 / p99 and
   errors at each N, and the run's seconds per step with and without the load (same run, windows
   before, during each level and after). bound: a burst past `--max-requests` is refused with 503 and
   Retry-After, and the server answers afterwards.
2. faults: SIGKILL of the server, the trainer, the environment or run-api at a random moment of a
   training run, a full disk (the runs folder on a small tmpfs, filled while the run trains), a
   state file truncated mid-write, a clock jump (times in the registry and metrics that jump): the
   restarted server re-adopts or ends each run with a named reason, every run folder still reads,
   no process or port is left behind.
3. input: each tool's own inputSchema, valid and broken (Hypothesis + hypothesis-jsonschema), and the
   special inputs (config bounds, escaping paths, shell characters, 1 MB strings, invalid UTF-8 in an
   environment file and a log), through a real client over HTTP: every answer a result or an error
   that names the bad value, the server up, no state file changed by a refused call.
4. auth: off loopback without a token the server refuses to start; with one, every endpoint of both
   transports refuses a missing or wrong token with 401; Host and Origin are checked; no secret in any
   answer, log or file the soak produced.

Loopback only, every part bounded in clients, calls and seconds. tests/test_soak.py runs each part
for a few seconds; the figures of a full run are in bench/README.md, the promises in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import itertools
import json
import os
import random
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psutil
import yaml
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "soak-token-7e3a91"
# Sentinels put where a key would be: none may appear in an answer, a log or a file (part 4)
SECRETS = {
    "RL_MCP_AUTH_TOKEN": TOKEN,
    "OPENROUTER_API_KEY": "sk-or-soak-sentinel-51b2",
    "WANDB_API_KEY": "soak-wandb-sentinel-0c4d",
    "HF_TOKEN": "hf_soaksentinel8e1f",
}
SMALL_RUN = {"total_steps": 2000, "group_size": 4, "batch_size": 8, "save_state_every": 2}
TERMINAL = {"completed", "failed", "stopped", "lost"}
READ_TOOLS = ("rl_check_status", "rl_list_runs", "rl_get_results", "rl_list_environments", "log")


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def server_env(home: Path, **extra: str) -> dict[str, str]:
    """A server's environment: its own state dir, the local profile, no rate limit, the sentinels."""
    env = {
        **os.environ,
        "RL_MCP_HOME": str(home),
        "RL_MCP_PROFILE": "local",
        "RL_MCP_STATUS_MIN_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
        **{k: v for k, v in SECRETS.items() if k != "RL_MCP_AUTH_TOKEN"},
        **extra,
    }
    for name in ("TINKER_API_KEY", "RL_MCP_AUTH_TOKEN", "RL_MCP_ENV_DIRS"):
        if name not in extra:
            env.pop(name, None)
    return env


# --- a server process ----------------------------------------------------------------------------


@dataclass
class Served:
    """`mcp-server-rl serve --transport http|sse` as a real process in a session of its own."""

    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path
    home: Path
    transport: str
    token: str | None

    @classmethod
    def start(
        cls,
        home: Path,
        transport: str = "http",
        *args: str,
        token: str | None = TOKEN,
        env: dict[str, str] | None = None,
        timeout: float = 90,
    ) -> Served:
        home.mkdir(parents=True, exist_ok=True)
        log_path = home.parent / f"{home.name}-serve-{time.time_ns()}.log"
        argv = [sys.executable, "-m", "rl_mcp", "serve", "--transport", transport, "--port", "0", *args]
        environ = server_env(home, **(env or {}))
        if token:
            environ["RL_MCP_AUTH_TOKEN"] = token
        with open(log_path, "wb") as err:
            proc = subprocess.Popen(
                argv, cwd=ROOT, env=environ, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(r"serving \w+ on (http://\S+)", log_path.read_text(errors="replace"))
            if match:
                return cls(proc, match.group(1), log_path, home, transport, token)
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"server did not start (exit {proc.poll()}):\n{log_path.read_text()[-3000:]}")
            time.sleep(0.05)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1].split("/")[0])

    @property
    def base(self) -> str:
        return self.url.rsplit("/", 1)[0]

    def kill(self) -> None:
        """SIGKILL to the server alone: a crash, no shutdown code runs (the runs' processes live on)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM, as a client or the operator ends it; SIGKILL to its group past `timeout`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    @asynccontextmanager
    async def client(self, mode: str = "auto", timeout: float = 120) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        if self.transport == "sse":
            async with Client(sse_client(self.url, headers=headers, timeout=timeout), mode="legacy") as client:
                yield client
            return
        http = httpx2.AsyncClient(headers=headers, timeout=timeout)
        async with http, Client(streamable_http_client(self.url, http_client=http), mode=mode) as client:
            yield client


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def answer(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    if result.is_error:
        raise RuntimeError(f"{tool}({args}) refused: {text_of(result)}")
    return result.structured_content or {}


async def start_run(client: Client, steps: int = SMALL_RUN["total_steps"], **edits: Any) -> str:
    """letter_repeat on tiny-chat, small groups, a state saved every two steps; its id once running."""
    await answer(client, "rl_select_environment", name="letter_repeat")
    for name, value in {**SMALL_RUN, "total_steps": steps, **edits}.items():
        await answer(client, "rl_edit_config", field=name, value=value)
    started = await answer(client, "rl_start_training", wait=True)
    if started["status"] != "running":
        raise RuntimeError(f"the run did not start: {started}")
    return str(started["run_id"])


async def wait_step(client: Client, run_id: str, step: int, timeout: float = 300) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            status = await answer(client, "rl_check_status", run_id=run_id)
            if status["status"] in TERMINAL:
                raise RuntimeError(f"run {run_id} ended before step {step}: {status['status']} {status.get('error')}")
            if status["step"] >= step:
                return status
            await anyio.sleep(0.3)


def run_dir_of(home: Path, run_id: str) -> Path:
    """The run's folder, from the registry (the answers name its files, not its folder)."""
    from rl_mcp.runs.store import RunStore

    store = RunStore(home / "runs.sqlite")
    try:
        rec = store.get(run_id)
    finally:
        store.close()
    if rec is None:
        raise RuntimeError(f"run {run_id} is not in {home / 'runs.sqlite'}")
    return Path(rec.run_dir)


def leaf(exc: BaseException) -> str:
    """The first exception inside nested exception groups, as `Type: message`."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def step_seconds(run_dir: Path, since: float, until: float) -> list[float]:
    """Seconds between consecutive steps both written within [since, until] (metrics.jsonl's times)."""
    from tinker_atropos.run_files import read_jsonl

    times = [row["time"] for row in read_jsonl(run_dir / "metrics.jsonl") if "time" in row]
    inside = [t for t in times if since <= t <= until]
    return [b - a for a, b in itertools.pairwise(inside)]


# --- 1. load -----------------------------------------------------------------------------------------


@dataclass
class LoadLevel:
    transport: str
    clients: int
    calls: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    step_s: float | None  # the run's median seconds per step during the level (None: no run)
    steps: int
    first_errors: list[str] = field(default_factory=list)


async def load_level(served: Served, clients: int, seconds: float, run_id: str, run_dir: Path | None) -> LoadLevel:
    """`clients` sessions (half 2025-era with a log subscription, half the default) calling the read
    tools in turn for `seconds`; every answer checked (a valid run id, so an error is a failure)."""
    latencies: list[float] = []
    errors: list[str] = []
    log_uri = f"rl://runs/{run_id}/logs/trainer"

    async def one_call(client: Client, kind: str) -> None:
        if kind == "log":
            read = await client.read_resource(log_uri)
            if not read.contents:
                raise RuntimeError("empty log read")
            return
        args = {"run_id": run_id} if kind in ("rl_check_status", "rl_get_results") else {}
        result = await client.call_tool(kind, args)
        if result.is_error:
            raise RuntimeError(f"{kind}: {text_of(result)[:200]}")

    async def session(no: int, deadline: float) -> None:
        mode = "legacy" if no % 2 else "auto"
        try:
            async with served.client(mode=mode) as client:
                if mode == "legacy" or served.transport == "sse":
                    await client.subscribe_resource(log_uri)
                turn = no
                while time.monotonic() < deadline:
                    kind = READ_TOOLS[turn % len(READ_TOOLS)]
                    turn += 1
                    t0 = time.perf_counter()
                    try:
                        await one_call(client, kind)
                        latencies.append(time.perf_counter() - t0)
                    except Exception as exc:
                        errors.append(f"{kind}: {leaf(exc)}"[:300])
        except Exception as exc:
            errors.append(f"session {no}: {leaf(exc)}"[:300])

    wall_start = time.time()
    deadline = time.monotonic() + seconds
    with anyio.fail_after(seconds + 180):
        async with anyio.create_task_group() as tg:
            for no in range(clients):
                tg.start_soon(session, no, deadline)
    steps = step_seconds(run_dir, wall_start, time.time()) if run_dir else []
    return LoadLevel(
        transport=served.transport,
        clients=clients,
        calls=len(latencies) + len(errors),
        errors=len(errors),
        p50_ms=round(percentile(latencies, 50) * 1000, 1),
        p99_ms=round(percentile(latencies, 99) * 1000, 1),
        max_ms=round(max(latencies, default=float("nan")) * 1000, 1),
        step_s=round(statistics.median(steps), 3) if steps else None,
        steps=len(steps),
        first_errors=errors[:3],
    )


@dataclass
class LoadReport:
    transport: str
    unloaded_step_s: float
    unloaded_steps: int
    levels: list[LoadLevel]


async def load_with_run(home: Path, transport: str, levels: list[int], seconds: float) -> LoadReport:
    """One server of `transport`, one training run, unloaded windows before and after the levels."""
    served = Served.start(home, transport, "--stop-runs-on-exit")
    try:
        async with served.client() as client:
            run_id = await start_run(client)
            await wait_step(client, run_id, 2)
        run_dir = run_dir_of(home, run_id)
        quiet: list[float] = []
        t0 = time.time()
        await anyio.sleep(seconds)
        quiet += step_seconds(run_dir, t0, time.time())
        results = []
        for clients in levels:
            level = await load_level(served, clients, seconds, run_id, run_dir)
            log(f"load {transport} x{clients}: {asdict(level)}")
            results.append(level)
        t0 = time.time()
        await anyio.sleep(seconds)
        quiet += step_seconds(run_dir, t0, time.time())
        async with served.client() as client:
            await answer(client, "rl_stop_training", run_id=run_id)
        return LoadReport(transport, round(statistics.median(quiet), 3) if quiet else float("nan"), len(quiet), results)
    finally:
        served.stop()


@dataclass
class BoundReport:
    max_requests: int
    sent: int
    ok: int
    refused_503: int
    with_retry_after: int
    other: dict[str, int]
    refusal_message: str
    answers_after: bool


async def bound_burst(home: Path, max_requests: int = 4, burst: int = 64) -> BoundReport:
    """`burst` tools/call POSTs at once against a server bounded at `max_requests`: the ones past the
    bound are 503 with Retry-After (none is dropped or a 5xx of another kind), and the server answers
    afterwards."""
    served = Served.start(home, "http", "--max-requests", str(max_requests))
    try:
        headers = {
            "Authorization": f"Bearer {TOKEN}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "Mcp-Protocol-Version": "2025-11-25",
        }
        codes: list[int] = []
        retry_after = 0
        message = ""
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            init = {
                "jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "soak", "version": "0"}},
            }  # fmt: skip
            first = await http.post(served.url, json=init)
            first.raise_for_status()
            session = first.headers.get("mcp-session-id")
            if session:
                http.headers["Mcp-Session-Id"] = session
            await http.post(served.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"})

            async def one(no: int) -> None:
                nonlocal retry_after, message
                body = {
                    "jsonrpc": "2.0", "id": no + 1, "method": "tools/call",
                    "params": {"name": "rl_get_current_config", "arguments": {}},
                }  # fmt: skip
                response = await http.post(served.url, json=body)
                codes.append(response.status_code)
                if response.status_code == 503:
                    retry_after += "retry-after" in response.headers
                    message = response.json()["error"]["message"]

            async with anyio.create_task_group() as tg:
                for no in range(burst):
                    tg.start_soon(one, no)
        async with served.client() as client:
            after = not (await client.call_tool("rl_list_environments", {})).is_error
        other: dict[str, int] = {}
        for code in codes:
            if code not in (200, 503):
                other[str(code)] = other.get(str(code), 0) + 1
        return BoundReport(max_requests, burst, codes.count(200), codes.count(503), retry_after, other, message, after)
    finally:
        served.stop()


# --- 2. faults ---------------------------------------------------------------------------------------


@dataclass
class Trial:
    kind: str
    at_s: float  # after the run was running
    run_id: str
    outcome: str  # "re-adopted" | the end status
    reason: str | None
    named: bool  # running again, or ended with a reason that says why
    recovery_s: float
    folder_ok: bool
    folder_notes: list[str]
    kept_weights: bool
    orphans: list[str]
    ports_bound: list[int]


def folder_problems(run_dir: Path) -> list[str]:
    """What in a run folder no longer reads: config.yaml, metrics.jsonl, the indexes, result.json.
    A half-written last line of a JSONL file is not a problem (every reader skips it); one in the middle is."""
    from tinker_atropos.run_files import read_training_states

    problems = []
    try:
        if not isinstance(yaml.safe_load((run_dir / "config.yaml").read_text()), dict):
            problems.append("config.yaml is not a mapping")
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        problems.append(f"config.yaml: {exc}")
    jsonls = [run_dir / "metrics.jsonl", run_dir / "eval.jsonl", *run_dir.glob("checkpoints/*/checkpoints.jsonl")]
    for path in jsonls:
        if not path.exists():
            continue
        lines = path.read_bytes().split(b"\n")
        for no, line in enumerate(lines[:-1]):  # the last piece is a tail not yet ended by its newline
            try:
                json.loads(line) if line.strip() else None
            except ValueError:
                problems.append(f"{path.name} line {no + 1} is not JSON")
    try:
        for state in read_training_states(run_dir):
            if not state.path.startswith("tinker://") and not Path(state.path).exists():
                problems.append(f"training_states.jsonl names {state.path}, which is gone")
    except (OSError, ValueError) as exc:
        problems.append(f"training_states.jsonl: {exc}")
    result = run_dir / "result.json"
    if result.exists():
        try:
            json.loads(result.read_text())
        except ValueError as exc:
            problems.append(f"result.json: {exc}")
    return problems


def saved_states(run_dir: Path) -> list[str]:
    from tinker_atropos.run_files import read_training_states

    try:
        return [s.path for s in read_training_states(run_dir) if Path(s.path).exists()]
    except (OSError, ValueError):
        return []


def live(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
    return out


def tree(pids: list[int]) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
    return procs


def of_home(home: Path, keep: set[int]) -> list[psutil.Process]:
    """Live processes whose environment names this state dir (every child inherits it), but `keep`."""
    found = []
    for p in psutil.process_iter():
        if p.pid in keep or p.pid == os.getpid():
            continue
        with contextlib.suppress(psutil.Error):
            if p.environ().get("RL_MCP_HOME") == str(home) and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


def bound_ports(ports: list[int]) -> list[int]:
    """Those of `ports` something still listens on (loopback)."""
    taken = []
    for port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                taken.append(port)
    return taken


async def settled(client: Client, run_id: str, recovered: Callable[[dict[str, Any]], bool], timeout: float) -> dict:
    with anyio.fail_after(timeout):
        while True:
            status = await answer(client, "rl_check_status", run_id=run_id)
            if recovered(status):
                return status
            await anyio.sleep(0.2)


def readopted_or_named(status: dict[str, Any]) -> bool:
    if status["status"] == "running":
        return all(p["state"] == "running" for p in status["processes"])
    return status["status"] in TERMINAL and bool(status.get("error") or status["status"] in ("stopped", "completed"))


async def kill_trial(
    home: Path, served: Served, kind: str, rng: random.Random, max_wait: float
) -> tuple[Trial, Served]:
    """One SIGKILL trial; returns it and the server serving afterwards (a new one if `kind` was server)."""
    async with served.client() as client:
        run_id = await start_run(client)
        status = await answer(client, "rl_check_status", run_id=run_id)
    run_dir = run_dir_of(home, run_id)
    at = rng.uniform(0, max_wait)
    await anyio.sleep(at)
    async with served.client() as client:
        status = await answer(client, "rl_check_status", run_id=run_id)
    pids = {p["name"]: p["pid"] for p in status["processes"] if p["state"] == "running"}
    before = tree(list(pids.values())) + (served.descendants() if kind == "server" else [])
    states_before = saved_states(run_dir)
    from rl_mcp.runs.store import RunStore

    store = RunStore(home / "runs.sqlite")
    rec = store.get(run_id)
    store.close()
    ports = [rec.api_port, rec.inference_port] if rec else []
    t_kill = time.monotonic()
    if kind == "server":
        served.kill()
        served = Served.start(home, "http", "--stop-runs-on-exit")
    else:
        os.kill(pids[kind], signal.SIGKILL)
    async with served.client() as client:
        status = await settled(
            client, run_id, lambda s: readopted_or_named(s) and (kind == "server" or s["status"] != "running"), 120
        )
        recovery = time.monotonic() - t_kill
        outcome = "re-adopted" if status["status"] == "running" else status["status"]
        reason = status.get("error")
        if status["status"] == "running":
            await answer(client, "rl_stop_training", run_id=run_id)
            ended = await settled(client, run_id, lambda s: s["status"] in TERMINAL, 120)
            reason = f"then {ended['status']}"
        results = await client.call_tool("rl_get_results", {"run_id": run_id})
    notes = folder_problems(run_dir)
    if results.is_error:
        notes.append(f"rl_get_results: {text_of(results)[:200]}")
    deadline = time.monotonic() + 20
    while (left := live(before)) and time.monotonic() < deadline:
        await anyio.sleep(0.2)
    keep = {served.proc.pid, *(p.pid for p in served.descendants())}
    orphans = [f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in {*left, *of_home(home, keep)} if p.is_running()]
    trial = Trial(
        kind=kind, at_s=round(at, 2), run_id=run_id, outcome=outcome, reason=reason,
        named=outcome == "re-adopted" or bool(reason), recovery_s=round(recovery, 2),
        folder_ok=not notes, folder_notes=notes, kept_weights=not states_before or bool(saved_states(run_dir)),
        orphans=orphans, ports_bound=bound_ports(ports),
    )  # fmt: skip
    return trial, served


@contextlib.contextmanager
def small_disk(path: Path, size_mb: int) -> Iterator[bool]:
    """`path` as a tmpfs of `size_mb` (root only): yields False where it cannot be mounted."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)], capture_output=True
        ).returncode
        == 0
    )
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(folder: Path) -> Path:
    """Fill the file system of `folder` to its last byte (ENOSPC); the filler's path."""
    filler = folder / "filler.bin"
    with open(filler, "wb", buffering=0) as fh:
        for size in (1 << 20, 4096, 1):
            with contextlib.suppress(OSError):
                while fh.write(b"\0" * size):
                    pass
    return filler


async def disk_full_trial(home: Path, rng: random.Random, max_wait: float) -> Trial | None:
    """The runs folder on an 48 MB tmpfs, filled at a random moment of a run: the run ends with a
    named reason, its folder still reads, the server keeps serving."""
    with small_disk(home / "runs", 48) as mounted:
        if not mounted:
            return None
        served = Served.start(home, "http", "--stop-runs-on-exit")
        try:
            async with served.client() as client:
                run_id = await start_run(client)
                run_dir = run_dir_of(home, run_id)
                at = rng.uniform(0, max_wait)
                await anyio.sleep(at)
                pids = [p["pid"] for p in (await answer(client, "rl_check_status", run_id=run_id))["processes"]]
                before = tree(pids)
                t_fill = time.monotonic()
                filler = fill(home / "runs")
                try:
                    status = await settled(client, run_id, lambda s: s["status"] in TERMINAL, 90)
                except TimeoutError:  # still training on a full disk: stopped, and said so
                    await answer(client, "rl_stop_training", run_id=run_id)
                    status = await settled(client, run_id, lambda s: s["status"] in TERMINAL, 60)
                    status["error"] = f"(still running on a full disk after 90 s) {status.get('error')}"
                recovery = time.monotonic() - t_fill
                filler.unlink()
                results = await client.call_tool("rl_get_results", {"run_id": run_id})
                notes = folder_problems(run_dir)
                if results.is_error:
                    notes.append(f"rl_get_results: {text_of(results)[:200]}")
                listing = await client.call_tool("rl_list_environments", {})
                if listing.is_error:
                    notes.append("the server stopped answering")
            deadline = time.monotonic() + 20
            while (left := live(before)) and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            return Trial(
                kind="disk_full", at_s=round(at, 2), run_id=run_id, outcome=status["status"],
                reason=status.get("error"), named=bool(status.get("error")), recovery_s=round(recovery, 2),
                folder_ok=not notes, folder_notes=notes, kept_weights=True,
                orphans=[f"{p.pid} {' '.join(p.cmdline()[:4])}" for p in left], ports_bound=[],
            )  # fmt: skip
        finally:
            served.stop()


async def truncated_state_trial(home: Path, rng: random.Random) -> Trial:
    """state.json cut at a random byte (a write torn by a crash, not by our atomic writer): the server
    starts, answers, and the next edit writes it whole again."""
    served = Served.start(home, "http")
    try:
        async with served.client() as client:
            await answer(client, "rl_select_environment", name="letter_repeat")
            await answer(client, "rl_edit_config", field="group_size", value=4)
    finally:
        served.kill()
    state = home / "state.json"
    whole = state.read_bytes()
    state.write_bytes(whole[: rng.randrange(1, len(whole))])
    t0 = time.monotonic()
    served = Served.start(home, "http")
    notes = []
    try:
        async with served.client() as client:
            config = await client.call_tool("rl_get_current_config", {})
            text = text_of(config) if config.is_error else ""
            if config.is_error and "select" not in text:
                notes.append(f"rl_get_current_config after the torn write: {text[:200]}")
            await answer(client, "rl_select_environment", name="letter_repeat")
            await answer(client, "rl_edit_config", field="group_size", value=6)
        recovery = time.monotonic() - t0
        if json.loads(state.read_text()).get("edits") != {"group_size": 6}:
            notes.append("state.json was not written whole again")
    finally:
        served.stop()
    return Trial("truncated_state", 0, "-", "served", None, True, round(recovery, 2), not notes, notes, True, [], [])


async def clock_jump_trial(home: Path, run_id: str) -> Trial:
    """The wall clock jumping under a run: a recorded run whose metrics' times go back an hour and
    forward a day, and whose registry times lie in the future. Every run tool answers, with no
    negative duration or ETA. (The machine's clock is not changed: other programs share it.)"""
    from rl_mcp.runs.store import RunStore

    store = RunStore(home / "runs.sqlite")
    rec = store.get(run_id)
    assert rec is not None
    run_dir = Path(rec.run_dir)
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    jumps = [-3600.0, 86400.0]
    for no, row in enumerate(rows):
        row["time"] = time.time() + jumps[no % 2]
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rec.created_at, rec.running_at, rec.ended_at = time.time() + 86400, time.time() + 86400, time.time() - 7200
    store.save(rec)
    store.close()
    served = Served.start(home, "http")
    notes = []
    t0 = time.monotonic()
    try:
        async with served.client() as client:
            for tool, args in [
                ("rl_check_status", {"run_id": run_id}),
                ("rl_get_results", {"run_id": run_id}),
                ("rl_list_runs", {}),
                ("rl_compare_runs", {"run_ids": [run_id, run_id]}),
            ]:
                result = await client.call_tool(tool, args)
                if result.is_error and tool != "rl_compare_runs":
                    notes.append(f"{tool}: {text_of(result)[:200]}")
                    continue
                for key, value in _numbers(result.structured_content or {}):
                    if any(w in key for w in ("eta", "elapsed", "seconds", "minutes")) and value < 0:
                        notes.append(f"{tool}: {key} = {value}")
        recovery = time.monotonic() - t0
    finally:
        served.stop()
    return Trial("clock_jump", 0, run_id, "served", None, True, round(recovery, 2), not notes, notes, True, [], [])


def _numbers(value: Any, key: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(v, f"{key}.{k}")
    elif isinstance(value, list):
        for v in value:
            yield from _numbers(v, key)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield key, float(value)


@dataclass
class FaultReport:
    trials: list[Trial]

    def summary(self) -> dict[str, Any]:
        return {
            "trials": len(self.trials),
            "runs_lost": sum(not t.named or not t.folder_ok or not t.kept_weights for t in self.trials),
            "orphans": sum(len(t.orphans) for t in self.trials),
            "ports_left": sum(len(t.ports_bound) for t in self.trials),
            "slowest_recovery_s": max((t.recovery_s for t in self.trials), default=0.0),
        }


async def faults(home: Path, trials: int, seed: int = 0, max_wait: float = 6.0) -> FaultReport:
    """`trials` SIGKILLs in turn over server, trainer, environment and run-api, then a full disk, a
    truncated state file and a clock jump."""
    rng = random.Random(seed)
    kinds = ["server", "trainer", "env", "api"]
    out: list[Trial] = []
    served = Served.start(home / "kills", "http", "--stop-runs-on-exit")
    try:
        for no in range(trials):
            trial, served = await kill_trial(home / "kills", served, kinds[no % len(kinds)], rng, max_wait)
            log(f"fault trial {no + 1}/{trials}: {asdict(trial)}")
            out.append(trial)
    finally:
        served.stop()
    if (disk := await disk_full_trial(home / "disk", rng, max_wait)) is not None:
        log(f"disk full: {asdict(disk)}")
        out.append(disk)
    out.append(await truncated_state_trial(home / "torn", rng))
    if out and out[0].run_id != "-":
        out.append(await clock_jump_trial(home / "kills", out[0].run_id))
    return FaultReport(out)


# --- 3. bad input ------------------------------------------------------------------------------------

BAD_UTF8_ENV = b'''"""An environment file with bytes that are not UTF-8: \xff\xfe\xc3\x28"""
from tinker_atropos.environments.letter_repeat import LetterRepeatEnv


class BadBytesEnv(LetterRepeatEnv):
    name = "bad_bytes"
'''
SHELL_NAMES = [
    "letter_repeat; touch /tmp/soak-pwned", "$(touch /tmp/soak-pwned)", "`touch /tmp/soak-pwned`",
    "letter_repeat|id", "../letter_repeat", "letter_repeat/../../etc", "a\nb", "a b", "*", "~root", "C:\\x",
]  # fmt: skip
ESCAPING = ["..", "../..", "../../etc/passwd", "/etc/passwd", "a/../../b", "%2e%2e%2f", "..\\..\\x", "\x00"]
PRECONDITIONS = (
    "no environment is selected", "select an environment", "rl_select_environment", "no run", "no runs",
    "not found", "unknown",
)  # fmt: skip


@dataclass
class ToolFuzz:
    tool: str
    tried: int = 0
    results: int = 0
    refusals: int = 0
    crashes: int = 0
    unnamed: int = 0
    state_changed: int = 0
    examples: list[str] = field(default_factory=list)  # every failure
    refusal_samples: list[str] = field(default_factory=list)  # the first few refusals, to read


def state_digest(home: Path) -> dict[str, str]:
    """Each state file's digest: the session, the registry, the served models, the run folders."""
    out = {}
    for path in sorted(home.rglob("*")):
        if path.is_file() and "cache" not in path.parts and "tmp" not in path.parts and not path.name.endswith(".log"):
            with contextlib.suppress(OSError):
                out[str(path.relative_to(home))] = hashlib.sha1(path.read_bytes()).hexdigest()
    return out


def names_a_value(text: str, args: dict[str, Any], fields: tuple[str, ...] = ()) -> bool:
    """A refusal names what was wrong: an argument's name or (the start of) its value, a field of
    the tool's schema (a required one left out), or a known precondition (nothing selected, no such run)."""
    lowered = text.lower()
    if any(p in lowered for p in PRECONDITIONS) or any(re.search(rf"\b{re.escape(f)}\b", text) for f in fields):
        return True
    for key, value in args.items():
        if key and key in text:
            return True
        shown = value if isinstance(value, str) else json.dumps(value)
        if shown and shown[:20] in text:
            return True
    return not args and bool(text.strip())


def crash_in(text: str) -> bool:
    return "Traceback" in text or bool(re.fullmatch(r"Error executing tool \S+:?\s*", text.strip()))


async def probe(
    client: Client,
    served: Served,
    stats: ToolFuzz,
    tool: str,
    args: dict[str, Any],
    *,
    resource: str | None = None,
    fields: tuple[str, ...] = (),
) -> None:
    """One call, judged: a crash, an unnamed refusal, a state file changed by a refusal."""
    before = state_digest(served.home)
    stats.tried += 1
    try:
        if resource is not None:
            try:
                await client.read_resource(resource)
                stats.results += 1
                return
            except MCPError as exc:
                text = exc.error.message
        else:
            result = await client.call_tool(tool, args)
            if not result.is_error:
                stats.results += 1
                return
            text = text_of(result)
    except MCPError as exc:
        text = exc.error.message
    stats.refusals += 1
    label = f"{tool}({json.dumps(args, default=str)[:160]}): {text[:200]}"
    if len(stats.refusal_samples) < 3:
        stats.refusal_samples.append(label)
    if crash_in(text):
        stats.crashes += 1
        stats.examples.append(f"crash {label}")
    elif not names_a_value(text, args if resource is None else {"uri": resource}, fields):
        stats.unnamed += 1
        stats.examples.append(f"unnamed {label}")
    if state_digest(served.home) != before:
        stats.state_changed += 1
        stats.examples.append(f"state changed {label}")
    if served.proc.poll() is not None:
        stats.crashes += 1
        raise RuntimeError(f"the server exited after {label}")


def schema_inputs(schema: dict[str, Any], count: int, seed: int) -> list[dict[str, Any]]:
    """`count` inputs from the tool's own schema, about half valid, the rest each broken in one way
    (a property of another type, a required one dropped, an unknown one added, a number past its bound)."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis_jsonschema import from_schema

    valid = from_schema(schema)
    props = schema.get("properties", {})
    wrong = st.none() | st.booleans() | st.integers() | st.text(max_size=30) | st.lists(st.integers(), max_size=3)

    def broken(draw_valid: dict[str, Any], how: int, key: str, other: Any) -> dict[str, Any]:
        out = dict(draw_valid)
        if how == 0 and props:
            out[key] = other
        elif how == 1 and schema.get("required"):
            out.pop(schema["required"][0], None)
        elif how == 2:
            out["soak_unknown_" + key] = other
        elif props:
            spec = props[key]
            bound = spec.get("maximum", spec.get("exclusiveMaximum"))
            out[key] = (bound + 1) if isinstance(bound, int | float) else "x" * 100_000
        return out

    keys = st.sampled_from(sorted(props)) if props else st.just("x")
    inputs = valid | st.builds(broken, valid, st.integers(0, 3), keys, wrong)
    found: list[dict[str, Any]] = []

    @settings(max_examples=count, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    @given(inputs)
    def collect(args: dict[str, Any]) -> None:
        found.append(args)

    del seed  # derandomized: the same inputs on every run, so a figure can be compared
    collect()
    return found[:count]


def special_inputs(run_id: str | None) -> list[tuple[str, dict[str, Any], str | None]]:
    """The hand-picked ones: escaping paths, shell characters, 1 MB strings (tool, args, resource)."""
    big = "x" * 1_000_000
    out: list[tuple[str, dict[str, Any], str | None]] = []
    for name in SHELL_NAMES + ESCAPING + [big]:
        out.append(("rl_select_environment", {"name": name}, None))
    for bad in [*ESCAPING, big, "../" * 50 + "etc/passwd"]:
        out += [
            ("rl_check_status", {"run_id": bad}, None),
            ("rl_get_results", {"run_id": bad}, None),
            ("rl_export_model", {"run_id": bad}, None),
            ("rl_compare_runs", {"run_ids": [bad, bad]}, None),
        ]
    for uri in [
        "rl://runs/../../etc/passwd", "rl://runs/..%2F..%2Fetc/config", "rl://runs/x/logs/../../../etc/passwd",
        "rl://config/../../state", "rl://environments/..%2F..", "file:///etc/passwd", "rl://" + big[:100_000],
    ]:  # fmt: skip
        out.append(("resources/read", {}, uri))
    if run_id:
        for process in ("trainer", "env", "../trainer", "api\x00"):
            out.append(("resources/read", {}, f"rl://runs/{run_id}/logs/{process}"))
        out.append(("rl_check_status", {"run_id": run_id}, None))
    out.append(("rl_edit_config", {"field": "group_size", "value": big}, None))
    return out


async def bound_inputs(client: Client, served: Served, stats: ToolFuzz, fields: int | None = None) -> None:
    """Each editable numeric field (the first `fields` of them) at its bound (accepted) and just past
    it (refused, naming the field)."""
    await answer(client, "rl_select_environment", name="letter_repeat")
    view = await answer(client, "rl_get_current_config")
    past_of = {"minimum": -1, "maximum": 1, "exclusiveMinimum": 0, "exclusiveMaximum": 0}
    numeric = [s for s in view["fields"] if s["editable"] and set(s["constraints"]) & set(past_of)]
    for spec in numeric[:fields]:
        for key, step in past_of.items():
            limit = spec["constraints"].get(key)
            if not isinstance(limit, int | float) or isinstance(limit, bool):
                continue
            if step:  # an inclusive bound: the bound itself is a valid value
                stats.tried += 1
                at = await client.call_tool("rl_edit_config", {"field": spec["name"], "value": limit})
                stats.results += not at.is_error
                if at.is_error:
                    stats.examples.append(f"refused at its bound: {spec['name']} = {limit}: {text_of(at)[:160]}")
            await probe(client, served, stats, "rl_edit_config", {"field": spec["name"], "value": limit + step})
    await client.call_tool("rl_edit_config", {"reset": True})


@dataclass
class InputReport:
    tools: list[ToolFuzz]
    pwned: bool
    server_up: bool

    def summary(self) -> dict[str, Any]:
        return {
            "inputs": sum(t.tried for t in self.tools),
            "crashes": sum(t.crashes for t in self.tools),
            "unnamed_refusals": sum(t.unnamed for t in self.tools),
            "state_changed_by_refusal": sum(t.state_changed for t in self.tools),
            "shell_ran": self.pwned,
            "server_up": self.server_up,
        }


def bad_bytes_files(home: Path, run_id: str | None) -> Path:
    """An env dir with an environment file that is not UTF-8; a log of `run_id` with such bytes."""
    env_dir = home.parent / f"{home.name}-envs"
    env_dir.mkdir(parents=True, exist_ok=True)
    (env_dir / "bad_bytes_env.py").write_bytes(BAD_UTF8_ENV)
    (env_dir / "latin1_env.py").write_bytes(BAD_UTF8_ENV.replace(b"bad_bytes", b"latin_one"))
    if run_id:
        for name in ("trainer", "env"):
            with open(home / "runs" / run_id / "logs" / f"{name}.log", "ab") as fh:
                fh.write(b"step 9 \xff\xfe\xc3\x28 bytes that are not UTF-8\n")
    return env_dir


async def bad_input(
    home: Path, examples: int, seed: int = 0, run_id: str | None = None, bound_fields: int | None = None
) -> InputReport:
    """Every tool with `examples` schema inputs and the special ones, through a client over HTTP."""
    Path("/tmp/soak-pwned").unlink(missing_ok=True)
    env_dir = bad_bytes_files(home, run_id)
    served = Served.start(home, "http", env={"RL_MCP_ENV_DIRS": str(env_dir)})
    stats: dict[str, ToolFuzz] = {}
    try:
        async with served.client() as client:
            listing = await answer(client, "rl_list_environments")
            names = {e["name"] for e in listing["environments"]}
            if "letter_repeat" not in names:
                raise RuntimeError(f"the listing lost the bundled environments beside a non-UTF-8 file: {names}")
            tools = (await client.list_tools()).tools
            for no, tool in enumerate(tools):
                fuzz = stats.setdefault(tool.name, ToolFuzz(tool.name))
                for args in schema_inputs(tool.input_schema, examples, seed + no):
                    if tool.name == "rl_select_environment" and str(args.get("name")) in names:
                        continue  # a real selection is a valid call, and it would start work later
                    fields = tuple(tool.input_schema.get("properties", {}))
                    await probe(client, served, fuzz, tool.name, args, fields=fields)
            special = stats.setdefault("special", ToolFuzz("special inputs"))
            for tool_name, args, uri in special_inputs(run_id):
                await probe(client, served, special, tool_name, args, resource=uri)
            bounds = stats.setdefault("config bounds", ToolFuzz("config bounds"))
            await bound_inputs(client, served, bounds, bound_fields)
            up = not (await client.call_tool("rl_list_environments", {})).is_error
        server_log = served.log_path.read_text(errors="replace")
        if "Traceback" in server_log or "unexpected exception" in server_log:
            stats["special"].crashes += 1
            stats["special"].examples.append("traceback in the server log: " + server_log[-800:])
    finally:
        served.stop()
    return InputReport(list(stats.values()), Path("/tmp/soak-pwned").exists(), up and served.proc.returncode == 0)


# --- 4. auth -----------------------------------------------------------------------------------------


@dataclass
class AuthReport:
    refuses_public_bind: bool
    checked: int
    not_401: list[str]
    host_origin: dict[str, int]
    token_works: bool
    secrets_found: list[str] = field(default_factory=list)


async def auth_checks(home: Path) -> AuthReport:
    """Every endpoint of both transports without, with a wrong and with a Basic token: 401."""
    public = subprocess.run(
        [sys.executable, "-m", "rl_mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "0"],
        cwd=ROOT, env=server_env(home), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    refuses = public.returncode == 2 and "--auth-token" in public.stderr
    bad_auth: list[dict[str, str]] = [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                                      {"Authorization": f"Bearer {TOKEN}x"}, {"Authorization": "Bearer"}]  # fmt: skip
    mcp_headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    bodies = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
         "capabilities": {}, "clientInfo": {"name": "soak", "version": "0"}}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "rl_list_runs", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "resources/read", "params": {"uri": "rl://runs"}},
        {"jsonrpc": "2.0", "id": 4, "method": "resources/read", "params": {"uri": "ui://rl-mcp/run-view.html"}},
        {"jsonrpc": "2.0", "id": 5, "method": "resources/subscribe", "params": {"uri": "rl://runs"}},
    ]  # fmt: skip
    checked = 0
    not_401: list[str] = []
    host_origin: dict[str, int] = {}
    token_works = True
    for transport in ("http", "sse"):
        served = Served.start(home, transport)
        try:
            async with httpx2.AsyncClient(timeout=30) as raw:
                if transport == "http":
                    requests = [("POST", served.url, body) for body in bodies]
                    requests += [("GET", served.url, None), ("DELETE", served.url, None)]
                else:
                    messages = f"{served.base}/messages/?session_id=00000000000000000000000000000000"
                    requests = [("GET", served.url, None), *[("POST", messages, body) for body in bodies]]
                for method, url, body in requests:
                    for auth in bad_auth:
                        checked += 1
                        if method == "GET" and transport == "sse":
                            async with raw.stream(method, url, headers=auth) as response:
                                code = response.status_code
                        else:
                            response = await raw.request(method, url, json=body, headers={**mcp_headers, **auth})
                            code = response.status_code
                        if code != 401:
                            not_401.append(f"{transport} {method} {url} {auth or 'no token'}: {code}")
                good = {**mcp_headers, "Authorization": f"Bearer {TOKEN}"}
                target = served.url if transport == "http" else f"{served.base}/messages/?session_id=" + "0" * 32
                ping = bodies[0]
                bad_host = await raw.post(target, json=ping, headers={**good, "Host": "evil.example:80"})
                host_origin[f"{transport} bad Host"] = bad_host.status_code
                bad_origin = await raw.post(target, json=ping, headers={**good, "Origin": "http://evil.example"})
                host_origin[f"{transport} bad Origin"] = bad_origin.status_code
            async with served.client() as client:
                token_works &= not (await client.call_tool("rl_list_environments", {})).is_error
        finally:
            served.stop()
    return AuthReport(refuses, checked, not_401, host_origin, token_works)


def secrets_in(paths: list[Path], texts: list[str]) -> list[str]:
    """Where a sentinel secret appears: any file under `paths` (logs, state dirs, run folders), any text."""
    found = []
    needles = {name: value.encode() for name, value in SECRETS.items()}
    for root in paths:
        files = [root] if root.is_file() else [p for p in root.rglob("*") if p.is_file()]
        for path in files:
            with contextlib.suppress(OSError):
                data = path.read_bytes()
                found += [f"{name} in {path}" for name, needle in needles.items() if needle in data]
    for no, text in enumerate(texts):
        found += [f"{name} in answer {no}" for name, value in SECRETS.items() if value in text]
    return found


# --- the bench -------------------------------------------------------------------------------------


async def main(args: argparse.Namespace) -> dict[str, Any]:
    parts = set(args.parts.split(","))
    out: dict[str, Any] = {"machine": machine(), "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    with tempfile.TemporaryDirectory(prefix="rl-mcp-soak-") as tmp:
        root = Path(tmp)
        if "load" in parts:
            out["load"] = [asdict(await load_with_run(root / "load-http", "http", args.levels, args.seconds))]
            if args.sse_levels:
                out["load"].append(asdict(await load_with_run(root / "load-sse", "sse", args.sse_levels, args.seconds)))
        if "bound" in parts:
            out["bound"] = asdict(await bound_burst(root / "bound", max_requests=4, burst=64))
            log(f"bound: {out['bound']}")
        if "faults" in parts:
            report = await faults(root / "faults", args.trials, seed=args.seed)
            out["faults"] = {"summary": report.summary(), "trials": [asdict(t) for t in report.trials]}
        if "input" in parts:
            fuzz = await bad_input(root / "input", args.examples, seed=args.seed)
            out["input"] = {"summary": fuzz.summary(), "tools": [asdict(t) for t in fuzz.tools]}
        if "auth" in parts:
            out["auth"] = asdict(await auth_checks(root / "auth"))
        out["secrets_found"] = secrets_in([root], [])
        out["load_average_after"] = os.getloadavg()
    return out


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        ),
        "unknown CPU",
    )
    return f"{model}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start"


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parts", default="load,bound,faults,input,auth")
    parser.add_argument("--levels", type=int, nargs="*", default=[1, 8, 32, 64])
    parser.add_argument("--sse-levels", type=int, nargs="*", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, default=10.0, help="each load level's and quiet window's length")
    parser.add_argument("--trials", type=int, default=8, help="SIGKILL trials (server, trainer, env, api in turn)")
    parser.add_argument("--examples", type=int, default=40, help="schema inputs per tool")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the figures here too")
    return parser.parse_args(argv)


if __name__ == "__main__":
    import warnings

    from rl_mcp import interrupts

    warnings.filterwarnings("ignore", message="resources/subscribe is removed")  # the 2025-era clients' way

    options = parse()
    figures = interrupts.run(main, options)
    text = json.dumps(figures, indent=1, default=str)
    print(text)
    if options.json:
        options.json.write_text(text)
