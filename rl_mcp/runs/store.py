"""The run registry: one SQLite file (WAL) in the state dir, shared by every server lifetime.

Why SQLite: runs outlive the server, two server processes may look at the same state dir
(a restart overlapping the old one), and WAL lets readers never block the writer.
"""

from __future__ import annotations

import builtins
import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rl_mcp.errors import UserError
from rl_mcp.runs.vocab import ACTIVE_STATUSES, RunStatus, Stage
from tinker_atropos.run_files import RunFiles

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    environment TEXT NOT NULL,
    profile TEXT NOT NULL,
    status TEXT NOT NULL,
    stage TEXT,
    run_dir TEXT NOT NULL,
    config_path TEXT NOT NULL,
    run_name TEXT NOT NULL,
    total_steps INTEGER NOT NULL,
    api_port INTEGER NOT NULL,
    inference_port INTEGER NOT NULL,
    processes TEXT NOT NULL DEFAULT '{}',
    created_at REAL NOT NULL,
    running_at REAL,
    ended_at REAL,
    error TEXT,
    log_tail TEXT
);
CREATE INDEX IF NOT EXISTS runs_status ON runs(status);
"""
# Columns added after the first release: an older runs.sqlite gets them on open (ALTER TABLE).
_ADDED_COLUMNS = {
    "resumed_from": "TEXT",  # the parent run id (a resume or a fork)
    "resumed_step": "INTEGER",  # the parent's state step this run started from
    "forked": "INTEGER NOT NULL DEFAULT 0",  # 1: a fork (the session's config), 0: a resume
}


class StoreError(UserError):
    """The registry cannot be used; the message says which file and what to do."""


@dataclass
class ProcessRecord:
    """One child process of a run. `create_time` tells a live pid from a recycled one."""

    pid: int
    create_time: float
    argv: list[str]
    log_path: str
    started_at: float
    exit_code: int | None = None
    ended_at: float | None = None


@dataclass
class RunRecord:
    run_id: str
    environment: str
    profile: str
    status: RunStatus
    run_dir: str
    config_path: str
    run_name: str
    total_steps: int
    api_port: int
    inference_port: int
    created_at: float
    stage: Stage | None = None
    processes: dict[str, ProcessRecord] = field(default_factory=dict)
    running_at: float | None = None
    ended_at: float | None = None
    error: str | None = None
    log_tail: list[str] | None = None
    resumed_from: str | None = None
    resumed_step: int | None = None
    forked: bool = False

    def __post_init__(self) -> None:  # records built from plain strings get the vocabulary
        self.status = RunStatus(self.status)
        self.stage = None if self.stage is None else Stage(self.stage)
        self.forked = bool(self.forked)

    @property
    def active(self) -> bool:
        return self.status.active

    @property
    def files(self) -> RunFiles:
        return RunFiles(Path(self.run_dir))

    def log_path(self, name: str) -> Path:
        return self.files.log(name)


_COLUMNS = [
    "run_id",
    "environment",
    "profile",
    "status",
    "stage",
    "run_dir",
    "config_path",
    "run_name",
    "total_steps",
    "api_port",
    "inference_port",
    "processes",
    "created_at",
    "running_at",
    "ended_at",
    "error",
    "log_tail",
    *_ADDED_COLUMNS,
]


RunLookup = Callable[[str], RunRecord]  # a run by id (RunManager.get), RunError when there is none


def _to_row(rec: RunRecord) -> tuple[object, ...]:
    values = asdict(rec)
    values["processes"] = json.dumps(values["processes"])
    values["log_tail"] = None if rec.log_tail is None else json.dumps(rec.log_tail)
    values["status"] = str(rec.status)
    values["stage"] = None if rec.stage is None else str(rec.stage)
    values["forked"] = int(rec.forked)
    return tuple(values[c] for c in _COLUMNS)


def _from_row(row: sqlite3.Row) -> RunRecord:
    values = dict(row)
    values["processes"] = {name: ProcessRecord(**proc) for name, proc in json.loads(values["processes"]).items()}
    values["log_tail"] = None if values["log_tail"] is None else json.loads(values["log_tail"])
    return RunRecord(**values)


class RunStore:
    """Thread-safe access to `runs.sqlite`; every write is its own short transaction."""

    def __init__(self, path: Path, *, busy_timeout_s: float = 5.0) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(
                str(path), timeout=busy_timeout_s, check_same_thread=False, isolation_level=None
            )
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA)
            self._migrate()
            self._conn.execute("SELECT count(*) FROM runs").fetchone()
        except sqlite3.DatabaseError as exc:
            raise StoreError(self._explain(exc)) from exc

    def _migrate(self) -> None:
        """Add the columns a registry written by an older version lacks (idempotent)."""
        have = {row["name"] for row in self._conn.execute("PRAGMA table_info(runs)")}
        for name, decl in _ADDED_COLUMNS.items():
            if name not in have:
                try:
                    self._conn.execute(f"ALTER TABLE runs ADD COLUMN {name} {decl}")
                except sqlite3.OperationalError as exc:  # another handle added it meanwhile
                    if "duplicate column" not in str(exc):
                        raise

    def _explain(self, exc: sqlite3.Error) -> str:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return (
                f"run registry {self.path} is locked by another process ({text}); "
                "retry, or stop the other rl-mcp server using this state dir"
            )
        return (
            f"run registry {self.path} is unreadable ({text}); move it aside "
            "(run files under runs/ are kept) and restart the server to create a fresh one"
        )

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self._conn
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
                self._conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(self._explain(exc)) from exc

    def _query(self, sql: str, args: tuple[object, ...] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, args).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(self._explain(exc)) from exc

    def insert(self, rec: RunRecord) -> None:
        marks = ",".join("?" * len(_COLUMNS))
        with self._tx() as conn:
            conn.execute(f"INSERT INTO runs ({','.join(_COLUMNS)}) VALUES ({marks})", _to_row(rec))

    def save(self, rec: RunRecord) -> None:
        """Write every field of `rec` (the manager owns a run's record while it supervises it)."""
        sets = ",".join(f"{c}=?" for c in _COLUMNS[1:])
        row = _to_row(rec)
        with self._tx() as conn:
            cur = conn.execute(f"UPDATE runs SET {sets} WHERE run_id=?", (*row[1:], row[0]))
            if cur.rowcount != 1:
                raise StoreError(f"run {rec.run_id} is not in the registry {self.path}")

    def get(self, run_id: str) -> RunRecord | None:
        rows = self._query("SELECT * FROM runs WHERE run_id=?", (run_id,))
        return _from_row(rows[0]) if rows else None

    def list(self, status: RunStatus | None = None) -> list[RunRecord]:
        if status is None:
            rows = self._query("SELECT * FROM runs ORDER BY created_at DESC")
        else:
            rows = self._query("SELECT * FROM runs WHERE status=? ORDER BY created_at DESC", (str(status),))
        return [_from_row(r) for r in rows]

    def ids(self) -> builtins.list[str]:
        return [r["run_id"] for r in self._query("SELECT run_id FROM runs ORDER BY created_at DESC")]

    def ports_in_use(self) -> set[int]:
        """Ports of runs that are still active, in any server lifetime."""
        marks = ",".join("?" * len(ACTIVE_STATUSES))
        rows = self._query(
            f"SELECT api_port, inference_port FROM runs WHERE status IN ({marks})",
            tuple(str(s) for s in ACTIVE_STATUSES),
        )
        return {p for r in rows for p in (r["api_port"], r["inference_port"])}

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def new_run_id(environment: str, now: float | None = None) -> str:
    """`<env>-<UTC timestamp>-<4 hex>`: sortable, readable, unique across restarts."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return f"{environment.replace(':', '.')}-{stamp}-{secrets.token_hex(2)}"  # reasoning_gym:x -> reasoning_gym.x
