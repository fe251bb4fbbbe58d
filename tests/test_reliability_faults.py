"""Faults on disk: a corrupt or locked run registry, a deleted run folder, a deleted log file, and
config writes that fail part-way. Each gives a clear error, the server keeps serving, and other
runs are unaffected.

The finished runs here are laid down as an earlier server lifetime leaves them (a registry row
plus the files of docs/run-files.md), so each fault costs no training time.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from mcp import Client

from rl_mcp.runs.store import ProcessRecord, RunRecord, RunStore


def seed_finished_run(home: Path, run_id: str, steps: int = 3) -> Path:
    """A completed local run as its files and registry row look after the trainer ended."""
    run_dir = home / "runs" / run_id
    weights = run_dir / "checkpoints" / run_id / "sampler_weights" / "final"
    weights.mkdir(parents=True)
    (weights / "adapter_config.json").write_text("{}")
    (run_dir / "logs").mkdir()
    for name in ("api", "trainer", "env"):
        (run_dir / "logs" / f"{name}.log").write_text(
            "".join(f"{name} line {i}\n" for i in range(50)) + f"{name} of {run_id} done\n"
        )
    config = {"env": {"total_steps": steps}, "trainer": {"total_steps": steps, "run_name": run_id, "use_wandb": False}}
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    with open(run_dir / "metrics.jsonl", "w") as f:
        for step in range(1, steps + 1):
            f.write(json.dumps({
                "step": step, "total_steps": steps, "time": time.time(), "loss": 0.1 / step,
                "reward_mean": 0.2 * step, "reward_std": 0.1, "percent_correct": 0.1 * step,
                "checkpoint": str(weights.parent / f"step-{step:06d}"),
            }) + "\n")  # fmt: skip
    (run_dir / "result.json").write_text(json.dumps({
        "status": "completed", "steps": steps, "final_checkpoint": str(weights),
        "final_state": str(run_dir / "checkpoints" / run_id / "weights" / "final"),
        "backend": "local", "wandb_url": None, "error": None,
    }))  # fmt: skip
    store = RunStore(home / "runs.sqlite")
    now = time.time()
    processes = {
        name: ProcessRecord(
            pid=2**22 - i,
            create_time=now - 55,
            argv=[name],
            log_path=str(run_dir / "logs" / f"{name}.log"),
            started_at=now - 55,
            exit_code=0,
            ended_at=now - 5,
        )
        for i, name in enumerate(("api", "trainer", "env"))
    }
    store.insert(RunRecord(
        run_id=run_id, environment="letter_repeat", profile="local", status="completed",
        run_dir=str(run_dir), config_path=str(run_dir / "config.yaml"), run_name=run_id,
        total_steps=steps, api_port=1, inference_port=2, created_at=now - 60, running_at=now - 50,
        ended_at=now - 5, processes=processes,
    ))  # fmt: skip
    store.close()
    return run_dir


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


async def assert_serving(client: Client) -> None:
    """The environment tools still answer correctly."""
    listing = await client.call_tool("rl_list_environments", {})
    assert not listing.is_error, text_of(listing)
    assert "letter_repeat" in {e["name"] for e in listing.structured_content["environments"]}


async def assert_results_intact(client: Client, run_id: str, steps: int = 3) -> None:
    results = await client.call_tool("rl_get_results", {"run_id": run_id})
    assert not results.is_error, text_of(results)
    assert results.structured_content["steps_completed"] == steps
    assert len(results.structured_content["history"]) == steps
    assert results.structured_content["final_weights_exists"] is True
    assert any(c.type == "image" for c in results.content)


# --- the run registry ------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_corrupt_registry_at_start_the_server_still_serves(rl_home: Path, mcp_app) -> None:
    (rl_home / "runs.sqlite").write_bytes(b"this is not a database" * 400)
    async with mcp_app() as (app, server), Client(server) as client:
        await assert_serving(client)
        runs = await client.call_tool("rl_list_runs", {})
        assert runs.is_error
        assert "runs.sqlite" in text_of(runs) and "move it aside" in text_of(runs)


@pytest.mark.anyio
async def test_registry_corrupted_while_serving(rl_home: Path, mcp_app) -> None:
    """Each run tool answers right (from what SQLite still holds) or names the registry; none crashes."""
    seed_finished_run(rl_home, "good-run")
    async with mcp_app() as (app, server), Client(server) as client:
        await assert_results_intact(client, "good-run")
        db = rl_home / "runs.sqlite"
        with sqlite3.connect(db) as conn:  # everything into the main file, then break that file
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with open(db, "r+b") as f:
            f.write(os.urandom(8192))
        assert app.settings.profile.name == "local"
        for tool, args in [
            ("rl_list_runs", {}),
            ("rl_check_status", {"run_id": "good-run"}),
            ("rl_get_results", {"run_id": "good-run"}),
            ("rl_check_status", {"run_id": "other-run"}),
            ("rl_select_environment", {"name": "letter_repeat"}),
            ("rl_start_training", {}),
        ]:
            result = await client.call_tool(tool, args)
            if result.is_error:
                text = text_of(result)
                assert "runs.sqlite" in text or (tool == "rl_check_status" and "other-run" in text), text
            elif tool == "rl_start_training":  # a run it could record must also have started
                await client.call_tool("rl_stop_training", {"run_id": result.structured_content["run_id"]})
        await assert_serving(client)


LOCKER = textwrap.dedent(
    """
    import sqlite3, sys, time
    conn = sqlite3.connect(sys.argv[1], isolation_level=None)
    conn.execute("BEGIN EXCLUSIVE")
    print("locked", flush=True)
    sys.stdin.read()  # hold the lock until the test closes stdin
    conn.execute("ROLLBACK")
    """
)


@pytest.mark.anyio
async def test_locked_registry_refuses_a_start_and_starts_nothing(rl_home: Path, mcp_app) -> None:
    seed_finished_run(rl_home, "good-run")
    async with mcp_app() as (app, server), Client(server) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "letter_repeat"})).is_error
        # what runs before the start is not the start's: earlier tests' leftovers (an in-process W&B
        # run's wandb-core), the warm template a selection starts for the run it leads to
        before = {p.pid for p in psutil.Process().children(recursive=True)}
        locker = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(rl_home / "runs.sqlite")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert locker.stdout.readline().strip() == "locked"
            started = await client.call_tool("rl_start_training", {})
            assert started.is_error
            assert "locked" in text_of(started) and "runs.sqlite" in text_of(started)
            # Reads go on under the writer's lock (WAL), and nothing was started.
            await assert_results_intact(client, "good-run")
            assert [r.run_id for r in app.runs.list()] == ["good-run"]
            assert not [p for p in psutil.Process().children(recursive=True) if p.pid not in {*before, locker.pid}]
        finally:
            locker.communicate("", timeout=30)
        await assert_serving(client)


# --- run files ---------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_deleted_run_folder_is_reported_and_other_runs_are_unaffected(rl_home: Path, mcp_app) -> None:
    gone = seed_finished_run(rl_home, "gone-run")
    seed_finished_run(rl_home, "kept-run")
    shutil.rmtree(gone)
    async with mcp_app() as (app, server), Client(server) as client:
        results = await client.call_tool("rl_get_results", {"run_id": "gone-run"})
        answer = text_of(results) if results.is_error else json.dumps(results.structured_content)
        assert str(gone) in answer, answer
        assert any(word in answer for word in ("missing", "deleted", "no longer", "gone", "not found")), answer
        status = await client.call_tool("rl_check_status", {"run_id": "gone-run"})
        assert status.is_error or status.structured_content["status"] in ("completed", "lost")
        await assert_results_intact(client, "kept-run")
        listed = await client.call_tool("rl_list_runs", {})
        assert {r["run_id"] for r in listed.structured_content["runs"]} == {"gone-run", "kept-run"}
        await assert_serving(client)


@pytest.mark.anyio
async def test_deleted_log_file_is_reported_and_other_logs_are_unaffected(rl_home: Path, mcp_app) -> None:
    run_dir = seed_finished_run(rl_home, "run-a")
    seed_finished_run(rl_home, "run-b")
    (run_dir / "logs" / "trainer.log").unlink()
    async with mcp_app() as (app, server), Client(server) as client:
        status = await client.call_tool("rl_check_status", {"run_id": "run-a"})
        assert not status.is_error, text_of(status)
        assert status.structured_content["logs"]["env"][-1] == "env of run-a done"
        try:
            missing = await client.read_resource("rl://runs/run-a/logs/trainer")
            body = "\n".join(getattr(c, "text", "") for c in missing.contents)
        except Exception as exc:
            body = str(exc)
        assert "trainer.log" in body and any(w in body for w in ("missing", "deleted", "no log", "not found")), body
        other = await client.read_resource("rl://runs/run-b/logs/trainer")
        assert other.contents[0].text.splitlines()[-1] == "trainer of run-b done"
        await assert_results_intact(client, "run-a")  # metrics and weights do not need the log
        await assert_serving(client)


# --- config writes that fail part-way ----------------------------------------------------------------

PARTIAL_WRITE = textwrap.dedent(
    """
    import resource, signal, sys
    from pathlib import Path
    # A real short write: the kernel refuses every byte past the limit (EFBIG), mid-file.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    from rl_mcp.session.run_config import write_run_config
    from rl_mcp.session.state import Session, SessionState
    what, path = sys.argv[1], Path(sys.argv[2])
    big = {f"field_{i}": "x" * 100 for i in range(200)}  # ~25 KB: far past the limit
    try:
        if what == "run_config":
            write_run_config(path, {"env": big, "trainer": {"total_steps": 1}})
        else:
            Session(path, SessionState(environment="letter_repeat", edits=big)).save()
    except OSError as exc:
        print(f"write failed: {exc}")
        sys.exit(3)
    """
)


@pytest.mark.parametrize("what", ["run_config", "session"])
def test_config_write_that_fails_part_way_leaves_the_old_file(tmp_path: Path, what: str) -> None:
    from rl_mcp.session.state import Session

    name = "config.yaml" if what == "run_config" else "state.json"
    folder = tmp_path / "target"
    folder.mkdir()
    target = folder / name
    old = (
        yaml.safe_dump({"env": {"total_steps": 7}})
        if what == "run_config"
        else json.dumps({"environment": "gsm8k_tinker", "edits": {"group_size": 4}})
    )
    target.write_text(old)
    out = subprocess.run(
        [sys.executable, "-c", PARTIAL_WRITE, what, str(target)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 3, out.stdout + out.stderr
    assert "File too large" in out.stdout
    assert target.read_text() == old
    assert sorted(p.name for p in folder.iterdir()) == [name], "no temporary file left behind"
    if what == "session":
        assert Session.load(target).state.edits == {"group_size": 4}


@pytest.mark.anyio
async def test_failed_session_write_changes_nothing_and_the_server_keeps_serving(rl_home: Path, mcp_app) -> None:
    async with mcp_app() as (app, server), Client(server) as client:
        assert not (await client.call_tool("rl_select_environment", {"name": "letter_repeat"})).is_error
        assert not (await client.call_tool("rl_edit_config", {"field": "group_size", "value": 4})).is_error
        state = rl_home / "state.json"
        saved = state.read_text()
        state.unlink()
        state.mkdir()  # the next atomic replace of state.json fails
        try:
            failed = await client.call_tool("rl_edit_config", {"field": "group_size", "value": 6})
            assert failed.is_error
            assert "state.json" in text_of(failed), text_of(failed)
            assert app.session.state.edits == {"group_size": 4}
            config = await client.call_tool("rl_get_current_config", {})
            assert config.structured_content["edits"] == {"group_size": 4}
            assert [p.name for p in rl_home.iterdir() if p.name.startswith(".state.json")] == []
        finally:
            state.rmdir()
        again = await client.call_tool("rl_edit_config", {"field": "group_size", "value": 6})
        assert not again.is_error, text_of(again)
        assert json.loads(state.read_text())["edits"] == {"group_size": 6} != json.loads(saved)["edits"]
        await assert_serving(client)
