"""Resume and fork without processes: the state index, the refusals, the seeded run folder, the
registry migration, and the Tinker path up to the network boundary."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from rl_mcp.environments.discovery import Discovery
from rl_mcp.runs.live import RunPlan
from rl_mcp.runs.preflight import RunError
from rl_mcp.runs.resume import ModelIdentity, ResumeRefused, choose_state, fork_plan, resume_plan
from rl_mcp.runs.start_plan import StartRequest, resumed
from rl_mcp.runs.store import RunRecord, RunStore
from rl_mcp.settings import BUNDLED_ENV_DIR
from tinker_atropos.run_files import (
    RunFiles,
    TrainingState,
    read_jsonl,
    read_training_states,
    write_training_states,
)
from tinker_atropos.trainer.config import ConfigError, parse_run_config
from tinker_atropos.trainer.training_state import StateKeeper


def _config(run_dir: Path, **tinker: Any) -> dict[str, Any]:
    return {
        "env": {"total_steps": 8, "group_size": 4, "batch_size": 8, "wandb_name": "lr-parent", "tokenizer_name": "x"},
        "openai": [{"model_name": "tiny-chat", "base_url": "http://127.0.0.1:1111/v1", "api_key": "local"}],
        "trainer": {
            "backend": "local",
            "base_model": "tiny-chat",
            "lora_rank": 16,
            "learning_rate": 1e-3,
            "total_steps": 8,
            "api_url": "http://127.0.0.1:1000",
            "inference_port": 1111,
            "run_dir": str(run_dir),
            "run_name": "lr-parent",
            **tinker,
        },
        "slurm": False,
        "testing": False,
    }


def _parent(tmp_path: Path, status: str = "stopped", states: tuple[int, ...] = (3, 5)) -> RunRecord:
    run_dir = tmp_path / "runs" / "parent"
    files = RunFiles(run_dir)
    files.logs_dir.mkdir(parents=True)
    files.config.write_text(yaml.safe_dump(_config(run_dir)))
    entries = []
    for step in states:
        folder = files.checkpoint_root("lr-parent") / "weights" / f"state-{step:06d}"
        folder.mkdir(parents=True)
        entries.append(TrainingState(step, str(folder), folder.name, "local", "tiny-chat", 16, time.time(), "wb1"))
    write_training_states(run_dir, entries)
    with open(files.metrics, "w") as fh:
        for step in range(1, 7):  # killed after step 6: steps 6 are past the last state
            fh.write(json.dumps({"step": step, "reward_mean": step / 10}) + "\n")
        fh.write('{"step": 7, "rew')  # a half-written line
    files.evals.write_text(json.dumps({"step": 2, "eval_accuracy": 0.1}) + "\n" + json.dumps({"step": 6}) + "\n")
    env_dir = files.env_positions_dir("lr-parent")
    env_dir.mkdir(parents=True)
    (env_dir / "step-2.json").write_text('{"_cursor": 9}')
    (env_dir / "step-3.json").write_text('{"_cursor": 13}')
    (env_dir / "step-5.json").write_text('{"_cur')  # half-written by atroposlib: skipped
    return RunRecord(
        run_id="parent",
        environment="letter_repeat",
        profile="local",
        status=status,
        run_dir=str(run_dir),
        config_path=str(files.config),
        run_name="lr-parent",
        total_steps=8,
        api_port=1000,
        inference_port=1111,
        created_at=time.time(),
    )


def test_refusals(tmp_path: Path) -> None:
    with pytest.raises(ResumeRefused, match="still running: stop it first"):
        choose_state(_parent(tmp_path / "a", status="running"), None)
    with pytest.raises(ResumeRefused, match="no saved training state"):
        choose_state(_parent(tmp_path / "b", states=()), None)
    parent = _parent(tmp_path / "c")
    with pytest.raises(ResumeRefused, match="no training state at step 4; saved states are at steps 3, 5"):
        choose_state(parent, 4)
    assert choose_state(parent, None).step == 5 and choose_state(parent, 3).step == 3
    state = choose_state(parent, 3)
    for target, what in [
        (ModelIdentity("local", "smollm2-135m", 16), "base model 'tiny-chat' (this run: 'smollm2-135m')"),
        (ModelIdentity("local", "tiny-chat", 8), "LoRA rank 16 (this run: 8)"),
        (ModelIdentity("tinker", "tiny-chat", 16), "backend 'local' (this run: 'tinker')"),
    ]:
        session = RunPlan("letter_repeat", Path("x.py"), lambda *a: Path("never"), None)
        with pytest.raises(ResumeRefused, match=what.replace("(", r"\(").replace(")", r"\)")):
            fork_plan(parent, state, session, target, total_steps=None)
    other_env = RunPlan("gsm8k_tinker", Path("x.py"), lambda *a: Path("never"), None)
    with pytest.raises(ResumeRefused, match="rl_select_environment"):
        fork_plan(parent, state, other_env, ModelIdentity("local", "tiny-chat", 16), total_steps=None)
    with pytest.raises(ResumeRefused, match="pass total_steps > 5"):
        resume_plan(parent, choose_state(parent, None), Path("x.py"), total_steps=5)


def test_resume_writes_the_parents_config_and_seeds_the_folder(tmp_path: Path) -> None:
    parent = _parent(tmp_path)
    state = choose_state(parent, 3)
    plan = resume_plan(parent, state, Path("env.py"), total_steps=12)
    assert plan.run_name == "lr-parent" and plan.lineage and plan.lineage.step == 3 and not plan.lineage.forked
    run_dir = tmp_path / "runs" / "child"
    path = plan.write_config(run_dir, 2000, 2222, "lr-parent")
    cfg = parse_run_config(yaml.safe_load(path.read_text()))  # the trainer accepts it
    t = cfg.trainer
    assert (t.resume_from, t.start_step, t.total_steps, t.wandb_run_id) == (state.path, 3, 12, "wb1")
    assert (t.api_url, t.inference_port, t.run_dir) == ("http://127.0.0.1:2000", 2222, run_dir.resolve())
    env = cfg.env.as_written()
    assert env["total_steps"] == 12 and env["rollout_server_url"] == "http://127.0.0.1:2000"
    assert cfg.openai[0]["base_url"] == "http://127.0.0.1:2222/v1"
    files = RunFiles(run_dir)
    assert [r["step"] for r in read_jsonl(files.metrics)] == [1, 2, 3]  # steps after the state: left out
    assert [r["step"] for r in read_jsonl(files.evals)] == [2]
    assert json.loads(files.env_position("lr-parent", 3).read_text()) == {"_cursor": 13}
    assert len(read_jsonl(parent.files.metrics)) == 6  # the parent is untouched


def test_fork_uses_the_session_config(tmp_path: Path) -> None:
    parent = _parent(tmp_path)

    def session_write(run_dir: Path, api_port: int, inference_port: int, run_name: str) -> Path:
        cfg = _config(run_dir, learning_rate=1e-4, run_name=run_name, wandb_run_id=None)
        cfg["env"]["wandb_name"] = "fork-name"
        RunFiles(run_dir).config.parent.mkdir(parents=True, exist_ok=True)
        RunFiles(run_dir).config.write_text(yaml.safe_dump(cfg))
        return RunFiles(run_dir).config

    session = RunPlan("letter_repeat", Path("env.py"), session_write, "fork-name")
    plan = fork_plan(
        parent, choose_state(parent, None), session, ModelIdentity("local", "tiny-chat", 16), total_steps=None
    )
    assert plan.lineage and plan.lineage.forked and plan.run_name == "fork-name"
    run_dir = tmp_path / "runs" / "fork"
    cfg = parse_run_config(yaml.safe_load(plan.write_config(run_dir, 3000, 3333, "fork-name").read_text()))
    assert (cfg.trainer.learning_rate, cfg.trainer.start_step, cfg.trainer.wandb_run_id) == (1e-4, 5, None)
    assert [r["step"] for r in read_jsonl(RunFiles(run_dir).metrics)] == [1, 2, 3, 4, 5]
    # the newest readable position at or before step 5 is step 3's, renamed for the fork's env
    assert json.loads(RunFiles(run_dir).env_position("fork-name", 5).read_text()) == {"_cursor": 13}


def test_start_step_needs_a_state_and_room(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="start_step > 0 needs resume_from"):
        parse_run_config(_config(tmp_path, start_step=2))
    with pytest.raises(ConfigError, match=r"start_step \(8\) must be below total_steps \(8\)"):
        parse_run_config(_config(tmp_path, start_step=8, resume_from="/x"))


class _FakeTraining:
    """save_state like the backends: the folder exists once save_state returns."""

    def __init__(self, root: Path, fail_on: str | None = None) -> None:
        self.root, self.fail_on, self.deleted = root, fail_on, []

    async def save_state_async(self, name: str) -> str:
        if name == self.fail_on:
            (self.root / f".{name}-staging").mkdir(parents=True)  # what a crash mid-save leaves
            raise OSError("disk full")
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        return str(folder)

    async def delete_state_async(self, path: str) -> None:
        self.deleted.append(Path(path).name)
        Path(path).rmdir()


def test_states_are_saved_every_n_bounded_and_never_half_written(tmp_path: Path) -> None:
    cfg = parse_run_config(_config(tmp_path, save_state_every=2, keep_states=2, total_steps=9))
    training = _FakeTraining(tmp_path / "weights", fail_on="state-000008")
    keeper = StateKeeper(cfg, training, "wb-id")  # type: ignore[arg-type]
    assert [s for s in range(1, 10) if keeper.due(s)] == [2, 4, 6, 8]

    async def go() -> None:
        for step in (2, 4, 6):
            await keeper.save(step)
        with pytest.raises(OSError):
            await keeper.save(8)
        await keeper.save(7, final=True)

    asyncio.run(go())
    states = read_training_states(tmp_path)
    assert [(s.step, s.name) for s in states] == [(4, "state-000004"), (6, "state-000006"), (7, "final")]
    assert training.deleted == ["state-000002"] and all(s.wandb_run_id == "wb-id" for s in states)
    # an index line whose folder is gone, and a torn last line, are never picked
    Path(states[0].path).rmdir()
    with open(RunFiles(tmp_path).training_states, "a") as fh:
        fh.write('{"step": 9, "path": "/x"')
    assert [s.step for s in read_training_states(tmp_path)] == [6, 7]


def test_old_registry_gets_the_lineage_columns(tmp_path: Path) -> None:
    path = tmp_path / "runs.sqlite"
    old = sqlite3.connect(path)
    old.executescript(
        """CREATE TABLE runs (run_id TEXT PRIMARY KEY, environment TEXT NOT NULL, profile TEXT NOT NULL,
        status TEXT NOT NULL, stage TEXT, run_dir TEXT NOT NULL, config_path TEXT NOT NULL, run_name TEXT NOT NULL,
        total_steps INTEGER NOT NULL, api_port INTEGER NOT NULL, inference_port INTEGER NOT NULL,
        processes TEXT NOT NULL DEFAULT '{}', created_at REAL NOT NULL, running_at REAL, ended_at REAL,
        error TEXT, log_tail TEXT);
        INSERT INTO runs (run_id, environment, profile, status, run_dir, config_path, run_name, total_steps,
        api_port, inference_port, created_at)
        VALUES ('old', 'e', 'local', 'completed', '/r', '/r/c', 'old', 3, 1, 2, 1.0);"""
    )
    old.commit()
    old.close()
    store = RunStore(path)
    rec = store.get("old")
    assert rec is not None and (rec.resumed_from, rec.resumed_step, rec.forked) == (None, None, False)
    rec.resumed_from, rec.resumed_step, rec.forked = "p", 3, True
    store.save(rec)
    assert RunStore(path).get("old") == rec  # a second open migrates nothing twice


def test_tinker_resume_goes_through_the_sdk_with_the_tinker_path(tmp_path: Path, monkeypatch) -> None:
    """Up to the network boundary: a local folder is refused before any contact, a tinker:// state
    goes to create_training_client_from_state_with_optimizer, and save_state's path is indexed."""
    from tinker_atropos.backends import tinker_backend
    from tinker_atropos.backends.base import BackendUnavailable

    cfg = parse_run_config(_config(tmp_path, backend="tinker", resume_from="/a/local/folder", start_step=3))
    with pytest.raises(BackendUnavailable, match="resumes from a tinker:// state"):
        tinker_backend.create_tinker_training_client(cfg.trainer)
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    cfg = parse_run_config(
        _config(tmp_path, backend="tinker", resume_from="tinker://run-1/weights/final", start_step=3)
    )
    with pytest.raises(BackendUnavailable, match="TINKER_API_KEY is not set"):
        tinker_backend.create_tinker_training_client(cfg.trainer)

    calls: list[tuple[str, Any]] = []

    class Future:
        def __init__(self, value: Any) -> None:
            self.value = value

        def result(self) -> Any:
            return self.value

        def __await__(self):  # the SDK's futures are awaitable
            yield from []
            return self.value

    class Saved:
        def __init__(self, path: str) -> None:
            self.path = path

    class Training:
        def save_state(self, name: str) -> Future:
            calls.append(("save_state", name))
            return Future(Saved(f"tinker://run-2/weights/{name}"))

    class Rest:
        async def delete_checkpoint_from_tinker_path_async(self, path: str) -> None:
            calls.append(("delete", path))

    class Service:
        def create_training_client_from_state_with_optimizer(self, path: str) -> Future:
            calls.append(("from_state", path))
            return Future(Training())

        def create_rest_client(self) -> Rest:
            return Rest()

    monkeypatch.setattr(tinker_backend, "_connect", lambda t: Service())
    client = tinker_backend.create_tinker_training_client(cfg.trainer)
    assert calls == [("from_state", "tinker://run-1/weights/final")]
    keeper = StateKeeper(parse_run_config(_config(tmp_path, backend="tinker", keep_states=1)), client)  # type: ignore[arg-type]

    async def go() -> None:
        await keeper.save(5)
        await keeper.save(10)

    asyncio.run(go())
    assert [s.path for s in read_training_states(tmp_path)] == ["tinker://run-2/weights/state-000010"]
    assert calls[-1] == ("delete", "tinker://run-2/weights/state-000005")


def test_a_start_is_planned_from_its_arguments_without_mcp(tmp_path: Path) -> None:
    """rl_start_training's decisions (rl_mcp/runs/start_plan.py): the resume arguments checked, a
    resume planned from the parent's own config and its environment found again."""
    with pytest.raises(RunError, match="go with resume_from=<run id>"):
        StartRequest(fork=True)
    assert StartRequest("parent").resumes and not StartRequest("parent", fork=True).resumes
    parent = _parent(tmp_path)
    lookup = {"parent": parent}.__getitem__
    catalog = Discovery((BUNDLED_ENV_DIR,)).scan()
    plan = resumed(StartRequest("parent", checkpoint_step=3, total_steps=12), lookup, catalog)
    assert plan.environment == "letter_repeat" and plan.env_file == catalog.environments["letter_repeat"].file
    assert plan.lineage is not None and not plan.lineage.forked and plan.lineage.step == 3
    gone = replace(catalog, environments={})
    with pytest.raises(RunError, match="environment 'letter_repeat' is no longer found"):
        resumed(StartRequest("parent"), lookup, gone)
