"""The run registry: round trips, WAL, concurrency between two handles, clear errors."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest

from rl_mcp.runs.ports import PortReservations
from rl_mcp.runs.store import ProcessRecord, RunRecord, RunStore, StoreError, new_run_id


def _record(run_id: str, status: str = "starting", ports: tuple[int, int] = (1, 2)) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        environment="letter_repeat",
        profile="local",
        status=status,
        run_dir=f"/tmp/{run_id}",
        config_path=f"/tmp/{run_id}/config.yaml",
        run_name=run_id,
        total_steps=3,
        api_port=ports[0],
        inference_port=ports[1],
        created_at=time.time(),
    )


def test_round_trip_and_filters(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    rec = _record("a")
    store.insert(rec)
    rec.processes["api"] = ProcessRecord(pid=123, create_time=1.5, argv=["run-api"], log_path="/x", started_at=2.0)
    rec.status, rec.log_tail, rec.error = "failed", ["line 1", "line 2"], "boom"
    store.save(rec)
    store.insert(_record("b", "running", (3, 4)))
    got = RunStore(tmp_path / "runs.sqlite").get("a")  # a second handle sees the commit
    assert got == rec
    assert [r.run_id for r in store.list(status="running")] == ["b"]
    assert set(store.ids()) == {"a", "b"}
    assert store.ports_in_use() == {3, 4}  # failed runs free their ports
    assert store.get("nope") is None
    mode = sqlite3.connect(tmp_path / "runs.sqlite").execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    stores = [RunStore(path), RunStore(path)]

    def write(i: int) -> None:
        for j in range(25):
            stores[i].insert(_record(f"r{i}-{j}"))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(stores[0].ids()) == 50


def test_corrupt_db_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="unreadable.*move it aside"):
        RunStore(path)


def test_locked_db_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    store = RunStore(path, busy_timeout_s=0.2)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            store.insert(_record("x"))
    finally:
        other.execute("ROLLBACK")
    store.insert(_record("x"))
    assert store.ids() == ["x"]


def test_unknown_run_save_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="not in the registry"):
        RunStore(tmp_path / "r.sqlite").save(_record("ghost"))


def test_run_ids_are_unique_and_named() -> None:
    ids = {new_run_id("letter_repeat", 0.0) for _ in range(50)}
    assert len(ids) > 45 and all(i.startswith("letter_repeat-19700101-000000-") for i in ids)


def test_port_reservations_never_clash_and_skip_active_runs(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs.sqlite")
    res = PortReservations(store.ports_in_use)
    first = res.reserve(2)
    store.insert(_record("live", "running", (first[0], first[1])))
    res.release(first)
    # The released ports are still used by an active run: a reservation never returns them.
    seen: set[int] = set()
    for _ in range(30):
        ports = res.reserve(2)
        assert not set(ports) & set(first)
        assert not set(ports) & seen  # still held: never handed out twice
        seen.update(ports)
    res.release(seen)
    assert res.reserved == frozenset()
