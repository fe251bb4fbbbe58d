"""The skyrl profile's failures, each fast and exact, through a real MCP client: no engine venv, no
Python 3.12, a base model SkyRL cannot load, an attached engine that does not answer."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from rl_mcp.app import open_app
from rl_mcp.distribution import COMMAND
from rl_mcp.doctor import report
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import Settings

pytestmark = pytest.mark.anyio


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content[0].text  # type: ignore[union-attr]
    return result.structured_content or {}


async def _start_error(environ: dict[str, str]) -> tuple[str, float]:
    """rl_start_training's error and the seconds it took to say it."""
    async with open_app(Settings.from_env(environ)) as app, Client(build_server(app)) as client:
        await _call(client, "rl_select_environment", name="arithmetic")
        started = time.monotonic()
        result = await client.call_tool("rl_start_training", {})
        assert result.is_error, result.structured_content
        return result.content[0].text, time.monotonic() - started  # type: ignore[union-attr]


def _environ(home: Path, **extra: str) -> dict[str, str]:
    import os

    env = {**os.environ, "RL_MCP_HOME": str(home), "RL_MCP_PROFILE": "skyrl", **extra}
    env.pop("TINKER_API_KEY", None)
    return env


SETUP_COMMAND = f"{COMMAND} setup skyrl-engine"  # by its path where the command is not on PATH


async def test_a_missing_engine_venv_names_the_command_that_makes_it(tmp_path: Path) -> None:
    venv = tmp_path / "no-venv"
    error, seconds = await _start_error(_environ(tmp_path / "home", RL_MCP_SKYRL_VENV=str(venv)))
    assert SETUP_COMMAND in error and str(venv) in error, error
    assert seconds < 10  # refused before anything starts (a pre-flight check, no process)
    lines, _ = report(_environ(tmp_path / "home", RL_MCP_SKYRL_VENV=str(venv)))
    assert any(SETUP_COMMAND in line for line in lines), lines


async def test_no_python312_says_where_it_looked(tmp_path: Path) -> None:
    bare_path = tmp_path / "bin"
    bare_path.mkdir()
    env = _environ(tmp_path / "home", RL_MCP_SKYRL_VENV=str(tmp_path / "no-venv"), PATH=str(bare_path))
    env.pop("RL_MCP_PYTHON312", None)  # a machine with no Python 3.12 anywhere (make names the one it found)
    error, _ = await _start_error(env)
    assert "Python 3.12" in error and "python3.12" in error and "PYTHON312=" in error, error


async def test_a_base_model_skyrl_cannot_load_is_refused_at_start(tmp_path: Path) -> None:
    """A GPT-2 folder: refused from its config before any engine starts."""
    model = tmp_path / "gpt2-folder"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}))
    profile = tmp_path / "gpt2-engine.yaml"
    text = (Path(__file__).resolve().parents[1] / "rl_mcp" / "profiles" / "skyrl.yaml").read_text()
    profile.write_text(text.replace("model: smollm2-135m", f"model: {model}"))
    env = _environ(tmp_path / "home", RL_MCP_PROFILE=str(profile))
    error, seconds = await _start_error(env)
    assert "GPT2LMHeadModel" in error and "LlamaForCausalLM" in error and str(model) in error, error
    assert seconds < 10


async def test_an_attached_engine_that_does_not_answer_fails_the_run_fast(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    env = _environ(tmp_path / "home", RL_MCP_ENGINE_URL=url, TINKER_CONNECT_TIMEOUT="5")
    lines, _ = report(env)
    assert any(url in line and "not reachable" in line for line in lines), lines
    async with open_app(Settings.from_env(env)) as app, Client(build_server(app)) as client:
        await _call(client, "rl_select_environment", name="arithmetic")
        run = await _call(client, "rl_start_training")
        config = (Path(run["config_path"])).read_text()
        assert f"tinker_base_url: {url}" in config and "self_hosted: true" in config
        with anyio.fail_after(180):
            while (status := await _call(client, "rl_check_status", run_id=run["run_id"]))["status"] != "failed":
                await anyio.sleep(0.5)
    tail = "\n".join(status["failure_log_tail"] or [])
    assert "trainer exited with code 3" in status["error"], status  # 3: the backend is unavailable
    assert "self-hosted Tinker engine" in tail and url in tail, tail


def test_the_engines_crash_line_is_kept_whatever_the_log_says_after_it(tmp_path: Path) -> None:
    """The API server logs its engine's crash, then every request that finishes as it stops: the
    line (with the exit code) is what `died()` quotes, not the tail it has scrolled out of."""
    from rl_mcp.engines.service import _LogMarker
    from rl_mcp.engines.skyrl import CRASH_MARKER

    log = tmp_path / "engine.log"
    log.write_text("before this start: Background engine crashed with exit code -6\n")
    marker = _LogMarker(log, CRASH_MARKER)
    with log.open("a") as f:
        f.write("INFO - uvicorn.access: GET /api/v1/healthz 200\nERROR - skyrl: Background engine cra")
    assert not marker.seen()  # half a line so far (and the earlier start's crash is not this one)
    with log.open("a") as f:
        f.write("shed with exit code -9, exiting API server\n")
        f.writelines(f'INFO - uvicorn.access: "POST /api/v1/asample" 200 ({i})\n' for i in range(40))
    assert (
        marker.seen()
        and marker.line == "ERROR - skyrl: Background engine crashed with exit code -9, exiting API server"
    )


def test_the_crash_line_names_the_death_after_the_api_server_has_exited_too() -> None:
    """The API server may have stopped itself (143) before a run asks why: the answer still gives
    the engine's own -9 (the OOM killer's mark), not the server's code."""
    from rl_mcp.engines.service import engine_death

    crash = "ERROR - skyrl: Background engine crashed with exit code -9, exiting API server"
    assert engine_death(None, None) is None  # up and well
    for api_exit in (None, 143):  # still stopping, or gone
        assert "exit code -9" in (engine_death(api_exit, crash) or ""), api_exit
    assert engine_death(143, None) == "SkyRL's Tinker engine exited with code 143"
