"""Training runs through a real MCP client, on the local profile, with real processes.

One in-process server (the app's task group, as main() holds it) serves both protocol
generations. Runs are shared between assertions to keep the file inside its time budget:
  A: select -> edit -> start(wait, progress) -> completed -> results -> list, watched by a
     2025-era subscriber (resources/subscribe) and a 2026-era listener (subscriptions/listen);
  B: started while A runs (two at once), then its trainer is killed with SIGKILL;
  C: stopped mid-run; D: an environment that crashes at import.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
import yaml
from mcp import Client
from mcp_types import ResourceListChangedNotification, ResourceUpdatedNotification
from test_progress import ProgressLog

from rl_mcp.app import AppContext, open_app
from rl_mcp.mcp_api.server import build_server
from rl_mcp.runs.store import ProcessRecord, RunRecord, RunStore
from rl_mcp.settings import Settings

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:resources/subscribe is removed"),
]

ROOT = Path(__file__).resolve().parents[1]
STEPS = 3
STALL_ENVS = Path(__file__).parent / "byo_envs" / "stalls"
SMALL = {"total_steps": STEPS, "group_size": 4, "batch_size": 8}

CRASHING_ENV = '''
"""An environment whose module raises when it is run to serve (not when it is introspected)."""
import sys

from tinker_atropos.environments.letter_repeat import LetterRepeatEnv

if "serve" in sys.argv:
    raise ImportError("crash_env: simulated import failure while serving")


class CrashEnv(LetterRepeatEnv):
    name = "crash_env"


if __name__ == "__main__":
    CrashEnv.cli()
'''


def environ(home: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "RL_MCP_HOME": str(home),
        "RL_MCP_PROFILE": "local",
        "RL_MCP_STATUS_MIN_INTERVAL": "0",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
        **extra,
    }
    env.pop("TINKER_API_KEY", None)
    return env


@asynccontextmanager
async def serving(env: dict[str, str], *, stop_runs_on_exit: bool = True) -> AsyncIterator[tuple[AppContext, Any]]:
    async with open_app(Settings.from_env(env, stop_runs_on_exit=stop_runs_on_exit)) as app:
        yield app, build_server(app)


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content or {}


async def wait_status(
    client: Client, run_id: str, wanted: set[str], timeout: float, poll: float = 0.5
) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            status = await call(client, "rl_check_status", run_id=run_id)
            if status["status"] in wanted:
                return status
            await anyio.sleep(poll)


async def wait_step(client: Client, run_id: str, step: int, timeout: float) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        while True:
            status = await call(client, "rl_check_status", run_id=run_id)
            assert status["status"] in ("starting", "running"), status
            if status["step"] >= step:
                return status
            await anyio.sleep(0.5)


def tree_pids(status: dict[str, Any]) -> list[psutil.Process]:
    """Every live process of a run: its children and all their descendants."""
    procs = []
    for proc in status["processes"]:
        try:
            root = psutil.Process(proc["pid"])
            procs += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return procs


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


async def configure(client: Client, env_name: str) -> None:
    await call(client, "rl_select_environment", name=env_name)
    for field, value in SMALL.items():
        await call(client, "rl_edit_config", field=field, value=value)


async def test_runs_end_to_end(tmp_path: Path) -> None:
    crash_dir = tmp_path / "envs"
    crash_dir.mkdir()
    (crash_dir / "crash_env.py").write_text(CRASHING_ENV)
    # A secret no process of a training run needs: it must reach none of them.
    env = environ(tmp_path / "home", RL_MCP_ENV_DIRS=str(crash_dir), OPENROUTER_API_KEY="sk-or-sentinel-e2e")
    legacy_updates: list[str] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceListChangedNotification):
            legacy_updates.append("list_changed")
        if isinstance(message, ResourceUpdatedNotification):
            legacy_updates.append(str(message.params.uri))

    async with serving(env) as (app, server):
        async with Client(server) as client, Client(server, mode="legacy", message_handler=on_message) as legacy:
            await configure(client, "letter_repeat")
            # run A trains on 2026's objective: cispo, DAPO's token mean, batch-scaled advantages, a KL to the base
            objective = {
                "loss_fn": "cispo",
                "loss_aggregation": "token_mean",
                "advantage_scale": "batch",
                "kl_beta": 0.05,
            }
            for field, value in objective.items():
                await call(client, "rl_edit_config", field=field, value=value)
            progress = ProgressLog()

            # --- A starts (returns at once), B starts beside it --------------------------------
            started = time.monotonic()
            a = await call(client, "rl_start_training")
            assert time.monotonic() - started < 5 and a["status"] == "starting"
            for name in ("api", "trainer", "env"):
                assert Path(a["logs"][name]).parent == Path(a["run_dir"]) / "logs"
            config_text = Path(a["config_path"]).read_text()
            assert f"127.0.0.1:{a['ports']['api']}" in config_text and "total_steps: 3" in config_text

            metrics_uri = f"rl://runs/{a['run_id']}/metrics"
            trainer_log_uri = f"rl://runs/{a['run_id']}/logs/trainer"
            await legacy.subscribe_resource(trainer_log_uri)
            await legacy.subscribe_resource(metrics_uri)
            modern_updates: list[str] = []

            async def listen(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
                async with client.listen(
                    resource_subscriptions=[trainer_log_uri, metrics_uri], resources_list_changed=True
                ) as sub:
                    task_status.started()
                    async for event in sub:
                        modern_updates.append(getattr(event, "uri", "list_changed"))

            async with anyio.create_task_group() as tg:
                await tg.start(listen)
                b_result = await client.call_tool("rl_start_training", {"wait": True}, progress_callback=progress)
                b = b_result.structured_content or {}
                assert b["status"] == "running", b
                assert b["run_id"] != a["run_id"] and b["run_dir"] != a["run_dir"]
                assert not set(a["ports"].values()) & set(b["ports"].values())
                progress.assert_rising()
                assert progress.seen[-1][0] == progress.seen[-1][1], progress.seen
                assert any("trainer" in m for m in progress.messages), progress.seen

                # --- B: kill -9 its trainer: failed within 2 s, with the trainer's log tail --------
                b_status = await call(client, "rl_check_status", run_id=b["run_id"])
                b_tree = tree_pids(b_status)
                assert len(b_tree) >= 3
                for proc in b_tree:
                    assert "OPENROUTER_API_KEY" not in proc.environ(), proc.cmdline()
                trainer_pid = next(p["pid"] for p in b_status["processes"] if p["name"] == "trainer")
                os.kill(trainer_pid, signal.SIGKILL)
                killed = time.monotonic()
                failed = await wait_status(client, b["run_id"], {"failed"}, timeout=10, poll=0.1)
                assert time.monotonic() - killed < 2.0
                assert "trainer exited with code -9" in failed["error"]
                assert failed["failure_log_tail"], failed
                await anyio.sleep(0.5)
                assert not alive(b_tree)

                # --- A completes ---------------------------------------------------------------
                done = await wait_status(client, a["run_id"], {"completed", "failed"}, timeout=240)
                assert done["status"] == "completed", done
                assert done["step"] == STEPS and done["total_steps"] == STEPS
                await anyio.sleep(1.2)  # one more push interval for the final lines
                tg.cancel_scope.cancel()

            assert trainer_log_uri in legacy_updates and metrics_uri in legacy_updates
            assert trainer_log_uri in modern_updates and metrics_uri in modern_updates
            assert "list_changed" in legacy_updates and "list_changed" in modern_updates  # B appeared
            assert len(legacy_updates) < 2 * 2 * (time.monotonic() - started) + 4  # <= 2/s per resource

            result = await client.call_tool("rl_get_results", {"run_id": a["run_id"]})
            assert not result.is_error
            res = result.structured_content or {}
            assert len(res["history"]) == STEPS == res["history_total_steps"]
            trained = yaml.safe_load(Path(a["config_path"]).read_text())["trainer"]
            assert {k: trained[k] for k in objective} == objective
            lines = [json.loads(line) for line in (Path(a["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
            assert all(m["reference_seconds"] is not None for m in lines if m["num_datums"]), lines
            assert res["final_weights"] and res["final_weights_exists"] and Path(res["final_weights"]).is_dir()
            # the held-out eval ran on the base model (step 0) and on the final weights, in every run
            steps = [(e["step"], e["final"]) for e in res["evals"]]
            assert steps[0] == (0, False) and steps[-1] == (STEPS, True), steps
            assert res["eval_summary"].startswith("eval accuracy ") and f"(step {STEPS})" in res["eval_summary"]
            images = [c for c in result.content if c.type == "image"]
            assert len(images) == 1 and base64.b64decode(images[0].data).startswith(b"\x89PNG")

            listing = await call(client, "rl_list_runs")
            assert {r["run_id"]: r["status"] for r in listing["runs"]} == {
                a["run_id"]: "completed",
                b["run_id"]: "failed",
            }
            assert [r["run_id"] for r in (await call(client, "rl_list_runs", status="failed"))["runs"]] == [b["run_id"]]

            log_text = (await client.read_resource(trainer_log_uri)).contents[0].text  # type: ignore[union-attr]
            assert 0 < len(log_text.splitlines()) <= 200
            cfg = (await client.read_resource(f"rl://runs/{a['run_id']}/config")).contents[0].text  # type: ignore[union-attr]
            assert "trainer:" in cfg

            # --- C: stopped mid-run; nothing of it is left ---------------------------------------
            c = await call(client, "rl_start_training", wait=True)
            assert c["status"] == "running", c
            c_tree = tree_pids(await call(client, "rl_check_status", run_id=c["run_id"]))
            stopped = await call(client, "rl_stop_training", run_id=c["run_id"])
            assert stopped["status"] == "stopped" and stopped["was"] == "running"
            assert all(p["state"] == "exited" for p in stopped["processes"])
            assert not alive(c_tree)
            again = await call(client, "rl_stop_training", run_id=c["run_id"])
            assert "already ended" in again["message"]

            # --- D: the environment crashes at import: failed at stage env, nothing left --------
            await configure(client, "crash_env")
            d = await call(client, "rl_start_training", wait=True)
            assert d["status"] == "failed" and d["stage"] == "env", d
            d_status = await call(client, "rl_check_status", run_id=d["run_id"])
            assert "simulated import failure" in "\n".join(d_status["failure_log_tail"])
            assert all(p["state"] == "exited" for p in d_status["processes"])
            assert not alive(tree_pids(d_status))

            unknown = await client.call_tool("rl_check_status", {"run_id": "nope"})
            assert unknown.is_error and a["run_id"] in unknown.content[0].text  # type: ignore[union-attr]


def _adoptable(home: Path, run_id: str, trainer: subprocess.Popen[bytes], **extra: ProcessRecord) -> RunRecord:
    run_dir = home / "runs" / run_id
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(f"tinker: {{run_name: {run_id}}}\n")
    create_time = psutil.Process(trainer.pid).create_time()
    return RunRecord(
        run_id=run_id,
        environment="letter_repeat",
        profile="local",
        status="running",
        run_dir=str(run_dir),
        config_path=str(run_dir / "config.yaml"),
        run_name=run_id,
        total_steps=10,
        api_port=1,
        inference_port=2,
        created_at=time.time(),
        running_at=time.time(),
        processes={
            "trainer": ProcessRecord(
                pid=trainer.pid,
                create_time=create_time,
                argv=["x"],
                log_path=str(run_dir / "logs" / "trainer.log"),
                started_at=0,
            ),
            **extra,
        },
    )


async def test_readopt_rate_limit_and_exit_modes(tmp_path: Path) -> None:
    """Runs recorded by an 'earlier server' whose trainer is alive are re-adopted and supervised."""
    home = tmp_path / "home"
    sleep = [sys.executable, "-c", "import time; time.sleep(120)"]
    earlier = subprocess.Popen(sleep, start_new_session=True)
    kept = subprocess.Popen(sleep, start_new_session=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        store = RunStore(home / "runs.sqlite")
        store.insert(
            _adoptable(
                home,
                "earlier-run",
                earlier,
                api=ProcessRecord(
                    pid=gone.pid, create_time=1.0, argv=["y"], log_path=str(home / "api.log"), started_at=0
                ),
            )
        )
        store.insert(_adoptable(home, "kept-run", kept))
        store.insert(
            RunRecord(
                run_id="dead-run",
                environment="letter_repeat",
                profile="local",
                status="running",
                run_dir=str(tmp_path / "dead"),
                config_path="/nonexistent",
                run_name="dead-run",
                total_steps=10,
                api_port=3,
                inference_port=4,
                created_at=time.time() - 5,
            )
        )
        env = environ(home, RL_MCP_STATUS_MIN_INTERVAL="1800")
        async with serving(env, stop_runs_on_exit=False) as (app, server):
            async with Client(server) as client:
                first = await call(client, "rl_check_status", run_id="earlier-run")
                assert first["status"] == "running" and not first["rate_limited"]
                assert {p["name"]: p["state"] for p in first["processes"]} == {"trainer": "running", "api": "exited"}
                limited = await call(client, "rl_check_status", run_id="earlier-run")
                assert limited["rate_limited"] and 1790 < limited["next_check_in_seconds"] <= 1800
                assert limited.get("latest") is None and limited.get("logs") in (None, {})  # checked nothing
                lost = await call(client, "rl_check_status", run_id="dead-run")
                assert lost["status"] == "lost"
                # the adopted trainer exits outside our view with no result.json: lost, noticed in < 2 s
                earlier.kill()
                earlier.wait()
                with anyio.fail_after(2):
                    while app.runs.get("earlier-run").active:  # type: ignore[union-attr]
                        await anyio.sleep(0.05)
                assert app.runs.get("earlier-run").status == "lost"  # type: ignore[union-attr]
                unknown = await client.call_tool("rl_check_status", {"run_id": "nope"})
                assert unknown.is_error and "kept-run" in unknown.content[0].text  # type: ignore[union-attr]
        # a graceful exit without --stop-runs-on-exit leaves runs going
        assert kept.poll() is None and store.get("kept-run").status == "running"  # type: ignore[union-attr]
        async with serving(env, stop_runs_on_exit=True) as (app, server):
            assert app.runs.get("kept-run").status == "running"  # type: ignore[union-attr]
        assert kept.wait(timeout=5) == -signal.SIGTERM
        assert store.get("kept-run").status == "stopped"  # type: ignore[union-attr]
    finally:
        for proc in (earlier, kept):
            proc.kill()
            proc.wait()


class ServerProcess:
    """`mcp-server-rl serve --transport http` as a real subprocess, killable like a crashed server."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        from rl_mcp.runs.ports import PortReservations

        self.port = PortReservations().reserve(1)[0]
        self.log = open(log, "ab")
        self.popen = subprocess.Popen(
            [sys.executable, "-m", "rl_mcp", "serve", "--transport", "http", "--port", str(self.port)],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        self.url = f"http://127.0.0.1:{self.port}/mcp"

    async def ready(self, timeout: float = 60) -> None:
        with anyio.fail_after(timeout):
            while True:
                assert self.popen.poll() is None, f"server exited with {self.popen.returncode}"
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", self.port)
                    await stream.aclose()
                    return
                except OSError:
                    await anyio.sleep(0.1)

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait()
        self.log.close()


async def test_server_killed_and_restarted_readopts_the_run(tmp_path: Path) -> None:
    # slow_ties' groups each wait 2 s (no CPU): the run outlives the second server's start on a busy
    # machine (letter_repeat's 5 steps of 0.2 s could end before it, and nothing was left to re-adopt)
    env = environ(tmp_path / "home", RL_MCP_ENV_DIRS=str(STALL_ENVS))
    first = ServerProcess(env, tmp_path / "server1.log")
    second: ServerProcess | None = None
    before: dict[str, int] = {}
    try:
        await first.ready()
        async with Client(first.url) as client:
            await configure(client, "slow_ties")
            for field, value in {"total_steps": STEPS + 2, "tied_groups": 0, "group_delay_s": 2.0}.items():
                await call(client, "rl_edit_config", field=field, value=value)
            run = await call(client, "rl_start_training", wait=True)
            assert run["status"] == "running", run
            before = {
                p["name"]: p["pid"] for p in (await call(client, "rl_check_status", run_id=run["run_id"]))["processes"]
            }
        first.kill()  # SIGKILL: no shutdown code runs; the run's processes are in their own sessions

        second = ServerProcess(env, tmp_path / "server2.log")
        await second.ready()
        async with Client(second.url) as client:
            status = await call(client, "rl_check_status", run_id=run["run_id"])
            assert status["status"] == "running", status
            assert {
                p["name"]: p["pid"] for p in status["processes"] if p["state"] == "running"
            }.items() <= before.items()
            assert before["trainer"] in [p["pid"] for p in status["processes"] if p["state"] == "running"]
            done = await wait_status(client, run["run_id"], {"completed", "failed", "lost"}, timeout=240, poll=1)
            assert done["status"] == "completed", done
            assert done["step"] == STEPS + 2
            assert not alive(tree_pids(done))
    finally:
        for server in (first, second):
            if server is not None:
                server.kill()
        for pid in before.values():  # whatever happened, leave nothing running
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize("stop_flag", [False, True])
async def test_sigterm_to_a_stdio_server(tmp_path: Path, stop_flag: bool) -> None:
    """SIGTERM to `mcp-server-rl serve` (stdio): runs keep going, or are stopped with --stop-runs-on-exit."""
    home = tmp_path / "home"
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    server: subprocess.Popen[bytes] | None = None
    try:
        store = RunStore(home / "runs.sqlite")
        store.insert(_adoptable(home, "lives-on", trainer))
        log = tmp_path / "server.log"
        argv = [sys.executable, "-m", "rl_mcp", "serve", *(["--stop-runs-on-exit"] if stop_flag else [])]
        with open(log, "wb") as err:
            server = subprocess.Popen(
                argv, env=environ(home), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err
            )
        with anyio.fail_after(30):
            while not all(line in log.read_text() for line in ("lives-on re-adopted", "serving stdio")):
                assert server.poll() is None, log.read_text()
                await anyio.sleep(0.1)
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 0
        if stop_flag:
            assert trainer.wait(timeout=5) == -signal.SIGTERM
            assert store.get("lives-on").status == "stopped"  # type: ignore[union-attr]
        else:
            await anyio.sleep(0.5)
            assert trainer.poll() is None
            assert store.get("lives-on").status == "running"  # type: ignore[union-attr]
    finally:
        if server is not None and server.poll() is None:
            server.kill()
            server.wait()
        trainer.kill()
        trainer.wait()
