"""RunManager start stages and failure handling, with real run-api and small real launchers.

The trainer here is a stand-in script (Settings.trainer_entry points at it), so each
failure mode is exact and fast; the real trainer is exercised in test_runs_mcp.py.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from pathlib import Path

import anyio
import psutil
import pytest

from rl_mcp.runs.manager import RunError, RunManager, RunPlan, StageTimeouts
from rl_mcp.settings import Settings

pytestmark = pytest.mark.anyio


def manager_for(tmp_path: Path, launcher: str, **environ: str) -> tuple[RunManager, RunPlan]:
    launcher_file = tmp_path / "launch_training.py"
    launcher_file.write_text(launcher)
    env_file = tmp_path / "env.py"
    env_file.write_text("import time; time.sleep(60)\n")
    env = {**os.environ, "RL_MCP_HOME": str(tmp_path / "home"), "RL_MCP_PROFILE": "local", **environ}
    if "TINKER_API_KEY" not in environ:
        env.pop("TINKER_API_KEY", None)
    settings = dataclasses.replace(Settings.from_env(env), trainer_entry=(str(launcher_file),))

    def write(run_dir: Path, api_port: int, inference_port: int, run_name: str) -> Path:
        path = run_dir / "config.yaml"
        path.write_text(f"tinker: {{run_name: {run_name}, total_steps: 3, api_url: 'http://127.0.0.1:{api_port}'}}\n")
        return path

    plan = RunPlan(environment="fake", env_file=env_file, write_config=write, run_name="fake-run")
    return RunManager(settings, timeouts=StageTimeouts(api_s=60, trainer_s=60, env_s=60), stop_grace_s=3), plan


def gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


async def test_trainer_exit_at_start_fails_the_stage_and_stops_the_api(tmp_path: Path) -> None:
    launcher = "import sys; print('no key for the backend', flush=True); sys.exit(3)\n"
    manager, plan = manager_for(tmp_path, launcher)
    async with anyio.create_task_group() as tg:
        await manager.attach(tg)
        rec = await manager.start(plan, wait=True)
        assert rec.status == "failed" and rec.stage == "trainer"
        assert "trainer exited with code 3" in (rec.error or "")
        assert rec.log_tail == ["no key for the backend"]
        assert rec.processes["trainer"].exit_code == 3
        assert rec.processes["api"].exit_code is not None  # stopped, not left behind
        assert gone([p.pid for p in rec.processes.values()])
        assert manager.store.get(rec.run_id).status == "failed"  # type: ignore[union-attr]
        assert rec.run_name == "fake-run"
        second = await manager.start(plan, wait=True)
        assert second.run_name == second.run_id  # the name is taken: the run id names it instead
        await manager.shutdown(stop_runs=True)
        tg.cancel_scope.cancel()


async def test_api_dying_while_the_trainer_starts_names_the_api(tmp_path: Path) -> None:
    manager, plan = manager_for(tmp_path, "import time; time.sleep(60)\n")
    async with anyio.create_task_group() as tg:
        await manager.attach(tg)
        rec = await manager.start(plan)
        with anyio.fail_after(60):
            while rec.stage != "trainer":
                await anyio.sleep(0.05)
        os.killpg(rec.processes["api"].pid, signal.SIGKILL)
        killed = time.monotonic()
        with anyio.fail_after(10):
            while rec.active:
                await anyio.sleep(0.05)
        assert time.monotonic() - killed < 2
        assert rec.status == "failed" and rec.stage == "trainer"
        assert "api exited with code -9" in (rec.error or "")
        assert rec.processes["api"].exit_code == -9
        assert rec.processes["trainer"].exit_code == -15  # stopped by us
        assert gone([p.pid for p in rec.processes.values()])
        await manager.shutdown(stop_runs=True)
        tg.cancel_scope.cancel()


async def test_stop_during_start_and_preflight(tmp_path: Path) -> None:
    manager, plan = manager_for(tmp_path, "import time; time.sleep(60)\n")
    async with anyio.create_task_group() as tg:
        await manager.attach(tg)
        rec = await manager.start(plan)
        with anyio.fail_after(60):
            while rec.stage != "trainer":
                await anyio.sleep(0.05)
        stopped = await manager.stop(rec.run_id)
        assert stopped.status == "stopped"
        assert gone([p.pid for p in rec.processes.values()])
        assert [r.run_id for r in manager.list("stopped")] == [rec.run_id]
        with pytest.raises(RunError, match="unknown status"):
            manager.list("bogus")
        with pytest.raises(RunError, match=f"known runs: {rec.run_id}"):
            manager.get("nope")
        missing = dataclasses.replace(plan, env_file=tmp_path / "missing.py")
        with pytest.raises(RunError, match="missing"):
            await manager.start(missing)
        await manager.shutdown(stop_runs=True)
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("key, message", [(None, "needs TINKER_API_KEY"), ("sk-123", "start with 'tml-'")])
def test_tinker_preflight_checks_the_key(tmp_path: Path, key: str | None, message: str) -> None:
    environ = {"RL_MCP_PROFILE": "tinker"}
    if key is not None:
        environ["TINKER_API_KEY"] = key
    manager, plan = manager_for(tmp_path, "pass\n", **environ)
    with pytest.raises(RunError, match=message):
        manager.preflight(plan)
