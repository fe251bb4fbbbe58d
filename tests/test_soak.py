"""The soak's short version (bench/soak.py, #89): a few seconds of each of its parts, against real
`mcp-server-rl serve` processes over Streamable HTTP and SSE, so the behaviour stays.

Load on a recorded run (the bench loads a training one), the 503 bound, a killed server re-adopting
and a killed trainer named, a full disk, a torn state file, a clock jump, bad input from each tool's
own schema, auth on every endpoint, and no secret anywhere. docs/reliability.md says which promise
each checks.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_reliability_faults import seed_finished_run
from test_runs_mcp import _adoptable

from rl_mcp.runs.store import RunStore

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore:resources/subscribe is removed")]
ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("soak", ROOT / "bench" / "soak.py")
assert _spec is not None and _spec.loader is not None
soak = importlib.util.module_from_spec(_spec)
sys.modules["soak"] = soak  # dataclasses look their module up by name
_spec.loader.exec_module(soak)


def no_secrets(tmp_path: Path) -> None:
    assert soak.secrets_in([tmp_path], []) == []


async def test_load_over_streamable_http_and_sse(tmp_path: Path) -> None:
    home = tmp_path / "home"
    seed_finished_run(home, "seeded")
    for transport, clients in (("http", 8), ("sse", 4)):
        served = soak.Served.start(home, transport)
        try:
            level = await soak.load_level(served, clients, 2.0, "seeded", None)
        finally:
            assert served.stop() == 0
        assert level.errors == 0, level.first_errors
        assert level.calls >= clients, level  # every session connected and called
        assert level.p99_ms < 5000, level  # the goal is 1 s at 32 clients; this machine is shared
    no_secrets(tmp_path)


async def test_past_the_bound_requests_are_refused_with_503_and_retry_after(tmp_path: Path) -> None:
    report = await soak.bound_burst(tmp_path / "home", max_requests=2, burst=24)
    assert report.refused_503 > 0, report
    assert report.with_retry_after == report.refused_503
    assert report.ok + report.refused_503 == report.sent and report.other == {}, report
    assert "--max-requests 2" in report.refusal_message
    assert report.answers_after


async def test_a_killed_server_re_adopts_and_a_killed_trainer_ends_with_a_reason(tmp_path: Path) -> None:
    home = tmp_path / "home"
    trainer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    served = None
    try:
        store = RunStore(home / "runs.sqlite")
        store.insert(_adoptable(home, "lives-on", trainer))
        store.close()
        served = soak.Served.start(home, "http")
        served.kill()  # SIGKILL: the run's trainer lives on in its own session
        t0 = time.monotonic()
        served = soak.Served.start(home, "http")
        async with served.client() as client:
            status = await soak.settled(client, "lives-on", soak.readopted_or_named, 30)
            assert status["status"] == "running", status
            assert time.monotonic() - t0 < 30
            trainer.send_signal(signal.SIGKILL)
            trainer.wait()
            ended = await soak.settled(client, "lives-on", lambda s: s["status"] in soak.TERMINAL, 30)
        assert ended["status"] == "lost" and ended["error"], ended
        port = served.port
        assert served.stop() == 0
        assert soak.of_home(home, keep=set()) == []
        assert soak.bound_ports([port]) == []
    finally:
        if served is not None:
            served.kill()
        trainer.kill()
        trainer.wait()


async def test_a_full_disk_leaves_every_run_file_readable(tmp_path: Path) -> None:
    from tinker_atropos.run_files import JsonlWriter, read_training_states, write_training_states

    home = tmp_path / "home"
    with soak.small_disk(home / "runs", 2) as mounted:
        if not mounted:
            pytest.skip("mounting a small tmpfs needs root")
        run_dir = seed_finished_run(home, "seeded")
        states = read_training_states(run_dir)
        row = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])  # a trainer's line, as shaped
        writer = JsonlWriter(run_dir / "metrics.jsonl")
        filler = soak.fill(home / "runs")
        with pytest.raises(OSError, match="No space left"):
            for step in range(4, 10_000):  # the metrics of the steps after the disk filled
                writer.write({**row, "step": step, "time": time.time(), "pad": "x" * 512})
        with contextlib.suppress(OSError):  # the index is replaced whole (a small one may still fit)
            write_training_states(run_dir, [*states, *states])
        with contextlib.suppress(OSError):
            writer.close()  # what was buffered may not be flushed
        filler.unlink()
        assert soak.folder_problems(run_dir) == []
        assert read_training_states(run_dir) in (states, [*states, *states])  # the old index or the new, whole
        served = soak.Served.start(home, "http")
        try:
            async with served.client() as client:
                results = await soak.answer(client, "rl_get_results", run_id="seeded")
            assert results["steps_completed"] >= 3 and results["final_weights_exists"], results
        finally:
            assert served.stop() == 0


async def test_a_torn_state_file_and_a_clock_jump(tmp_path: Path) -> None:
    import random

    torn = await soak.truncated_state_trial(tmp_path / "torn", random.Random(0))
    assert torn.folder_ok, torn.folder_notes
    home = tmp_path / "jump"
    seed_finished_run(home, "seeded")
    jump = await soak.clock_jump_trial(home, "seeded")
    assert jump.folder_ok, jump.folder_notes


async def test_bad_input_from_each_tools_schema(tmp_path: Path) -> None:
    home = tmp_path / "home"
    seed_finished_run(home, "seeded")
    report = await soak.bad_input(home, examples=3, run_id="seeded", bound_fields=4)
    summary = report.summary()
    failures = [e for t in report.tools for e in t.examples]
    assert summary["crashes"] == 0 and summary["unnamed_refusals"] == 0, failures
    assert summary["state_changed_by_refusal"] == 0, failures
    assert not summary["shell_ran"] and summary["server_up"]
    assert {t.tool for t in report.tools} >= {"rl_start_training", "rl_edit_config", "special inputs"}
    assert summary["inputs"] >= 100
    no_secrets(tmp_path)


async def test_auth_on_every_endpoint_and_no_secret_anywhere(tmp_path: Path) -> None:
    report = await soak.auth_checks(tmp_path / "home")
    assert report.refuses_public_bind
    assert report.not_401 == [] and report.checked >= 50, report.not_401
    assert report.host_origin == {
        "http bad Host": 421, "http bad Origin": 403, "sse bad Host": 421, "sse bad Origin": 403,
    }  # fmt: skip
    assert report.token_works
    no_secrets(tmp_path)
