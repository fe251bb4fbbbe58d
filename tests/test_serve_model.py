"""rl_serve_model: a run's real adapter (tiny-chat, saved through the checkpoint store) served by the
product's inference server on a loopback endpoint, through a real MCP client, with real processes.

One story keeps the file to two server starts: served (a chat completion answers under the served
name), listed with its process and memory, asked again (the same process), refused for bad input
with nothing started; it outlives its MCP server, is re-adopted by the next one and stopped without
an orphan; the command line refuses a model too big for its memory limit, lists what the server
serves and serves in the foreground; the exit of a server with --stop-runs-on-exit stops that too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil
import pytest
import yaml
from mcp import Client
from serve_paths import run_record
from test_runs_mcp import call, environ, serving

from rl_mcp.inference.run_weights import saved_checkpoints
from rl_mcp.runs.store import RunStore
from rl_mcp.serving.clients import hermes_config, hermes_yaml
from rl_mcp.serving.plan import ServeError, plan_serve, server_config
from tinker_atropos.hermes_harness.hermes_config import NO_SKILLS

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
RUN_ID = "letter_repeat-served-1"
NO_WEIGHTS = "letter_repeat-served-none"
FINAL, STEP_ONE = f"{RUN_ID}@final", f"{RUN_ID}@step-000001"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A state dir with a run that saved two real adapters (step 1 and final) and a run that saved none."""
    from tinker_atropos.backends.local import LocalTrainingClient, load_base_model

    home = tmp_path_factory.mktemp("serve-home")
    store = RunStore(home / "runs.sqlite")
    rec = run_record(home, RUN_ID)
    client = LocalTrainingClient(
        load_base_model("tiny-chat", "cpu"), rank=8, run_dir=Path(rec.run_dir), run_name=RUN_ID
    )
    client.save_weights_for_sampler("step-000001")
    client.save_weights_for_sampler("final")
    store.insert(rec)
    store.insert(run_record(home, NO_WEIGHTS))
    store.close()
    return home


def _gone(pids: list[int], create_times: list[float]) -> bool:
    for pid, created in zip(pids, create_times, strict=True):
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def _tree(pid: int) -> tuple[list[int], list[float]]:
    procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    return [p.pid for p in procs], [p.create_time() for p in procs]


async def _wait_gone(tree: tuple[list[int], list[float]], timeout: float = 15.0) -> None:
    with anyio.fail_after(timeout):
        while not _gone(*tree):
            await anyio.sleep(0.1)


async def _error(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    assert result.is_error, result.structured_content
    return result.content[0].text  # type: ignore[union-attr]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "rl_mcp", "serve-model", *args]


def _cli_env(home: Path, **extra: str) -> dict[str, str]:
    return {**environ(home, **extra), "PYTHONPATH": f"{ROOT}:{ROOT / 'tinker-atropos'}"}


def _read_answer(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The JSON answer a foreground serve prints once its model serves (indented: up to its last `}`)."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.rstrip() == "}":
            return json.loads("".join(lines))
    raise AssertionError(f"no answer (exit {proc.wait()}): {''.join(lines)}")


async def test_a_run_s_weights_serve_list_readopt_and_stop(home: Path) -> None:
    env = environ(home)
    async with serving(env, stop_runs_on_exit=False) as (app, server), Client(server) as client:
        assert "unknown run id 'no-such-run'" in await _error(client, "rl_serve_model", run_id="no-such-run")
        assert "has no saved weights yet" in await _error(client, "rl_serve_model", run_id=NO_WEIGHTS)
        assert "no checkpoint at step 7; saved steps: 1, 0" in await _error(
            client, "rl_serve_model", run_id=RUN_ID, weights=7
        )

        served = await call(client, "rl_serve_model", run_id=RUN_ID, weights="final")
        assert served["model"] == FINAL and served["status"] == "ready" and not served["already_serving"]
        assert (
            served["url"] == f"http://127.0.0.1:{served['port']}/v1" and served["chosen_because"] == "the final weights"
        )
        assert served["weights"] == saved_checkpoints(app.runs.get(RUN_ID))[-1].path
        async with httpx.AsyncClient(timeout=60, trust_env=False) as http:
            body = {"model": FINAL, "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}
            reply = await http.post(f"{served['url']}/chat/completions", json=body)
        assert reply.status_code == 200 and reply.json()["model"] == FINAL, reply.text
        assert isinstance(reply.json()["choices"][0]["message"]["content"], str)

        # what makes Hermes use it: the block, its fields, a HERMES_HOME written with it, the command
        hermes = served["hermes"]
        assert yaml.safe_load(hermes["config_yaml"]) == hermes["config"] == hermes_config(FINAL, served["url"])
        assert hermes["config"]["approvals"] == {"mode": "off"}  # quoted: YAML's bare off is false
        assert (Path(hermes["home"]) / "config.yaml").read_text() == hermes["config_yaml"]
        assert (Path(hermes["home"]) / NO_SKILLS).is_file()
        assert hermes["command"].startswith(f"HERMES_HOME={hermes['home']} hermes -t terminal,file -z ")
        assert f'base_url="{served["url"]}"' in served["openai_python"]
        memory = served["memory"]
        assert memory["rss_bytes"] > 100 * 2**20 and memory["estimate_bytes"] > memory["rss_bytes"] / 2
        assert memory["available_bytes"] > memory["estimate_bytes"]

        listed = await call(client, "rl_list_served_models")
        (one,) = listed["served"]
        assert (one["model"], one["pid"], one["port"]) == (FINAL, served["pid"], served["port"])
        assert one["memory"]["rss_bytes"] > 0 and listed["rss_bytes"] == one["memory"]["rss_bytes"]
        again = await call(client, "rl_serve_model", run_id=RUN_ID, weights="final")
        assert again["already_serving"] and again["pid"] == served["pid"]

        taken = await _error(client, "rl_serve_model", run_id=RUN_ID, weights=1, port=served["port"])
        assert f"port {served['port']} is in use" in taken
        assert [s["model"] for s in (await call(client, "rl_list_served_models"))["served"]] == [FINAL]
    tree = _tree(served["pid"])  # it outlived its server (which did not stop runs on exit)

    # the command line: a model over its memory limit refused with the figures; the list seen from there
    too_big = subprocess.run(
        _cli(RUN_ID, "--weights", "1"),
        env=_cli_env(home, RL_MCP_SERVE_MEMORY_LIMIT_BYTES="1000"),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert too_big.returncode == 1 and "would take about" in too_big.stderr, too_big.stderr
    assert "RL_MCP_SERVE_MEMORY_LIMIT_BYTES (0.00 GiB)" in too_big.stderr and "nothing was started" in too_big.stderr
    listed_cli = subprocess.run(_cli("--list"), env=_cli_env(home), capture_output=True, text=True, timeout=60)
    assert [s["pid"] for s in json.loads(listed_cli.stdout)["served"]] == [served["pid"]], listed_cli.stderr

    # the command line serves in the foreground, beside the next server
    foreground = subprocess.Popen(
        _cli(RUN_ID, "--weights", "1"), env=_cli_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        async with serving(env, stop_runs_on_exit=True) as (app, server), Client(server) as client:
            listed = await call(client, "rl_list_served_models")  # re-adopted: the same process
            assert [s["pid"] for s in listed["served"] if s["model"] == FINAL] == [served["pid"]]
            stopped = await call(client, "rl_stop_served_model", model=FINAL)
            assert stopped["was_running"] and stopped["pid"] == served["pid"]
            await _wait_gone(tree, timeout=1)  # stop returns once the whole tree is gone: no orphan
            assert "no served model" in await _error(client, "rl_stop_served_model", model=FINAL)

            cli_served = await anyio.to_thread.run_sync(_read_answer, foreground)
            assert cli_served["model"] == STEP_ONE and cli_served["checkpoint_step"] == 1
            listed = await call(client, "rl_list_served_models")
            assert [(s["model"], s["pid"]) for s in listed["served"]] == [(STEP_ONE, cli_served["pid"])]
            cli_tree = _tree(cli_served["pid"])
        # --stop-runs-on-exit: the server's exit stopped what it served, the command line's included
        await _wait_gone(cli_tree, timeout=1)
        assert foreground.wait(30) == 1 and "inference server ended" in (foreground.stderr.read() or "")
        assert not list((home / "served").glob("*/served.json"))  # no record left behind
    finally:
        if foreground.poll() is None:
            foreground.kill()


def test_on_an_nvidia_gpu_a_run_s_weights_are_served_by_vllm(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU here: the machine's answer (its driver's files) is given; the choice and the config it writes
    are the product's."""
    from rl_mcp.serving import plan as serve_plan

    rec = RunStore(home / "runs.sqlite").get(RUN_ID)
    assert rec is not None
    monkeypatch.setattr(serve_plan, "nvidia_gpu", lambda: True)
    plan = plan_serve(rec, None)
    assert plan.sampler == "vllm" and server_config(plan, 9, home)["trainer"]["sampler"] == "vllm"


def test_what_is_served_and_hermes_block_are_decided_without_mcp(home: Path) -> None:
    rec = RunStore(home / "runs.sqlite").get(RUN_ID)
    assert rec is not None
    plan = plan_serve(rec, None)
    assert (plan.model, plan.base_model, plan.backend, plan.sampler) == (FINAL, "tiny-chat", "local", "engine")
    assert server_config(plan, 9, home)["trainer"]["sampler"] == "engine"
    assert plan_serve(rec, 1).model == STEP_ONE
    with pytest.raises(ServeError, match="no validation evaluation of a trained checkpoint, so no 'best'"):
        plan_serve(rec, "best")
    text = hermes_yaml("r@final", "http://127.0.0.1:9/v1")
    assert yaml.safe_load(text) == hermes_config("r@final", "http://127.0.0.1:9/v1")
    assert "mode: 'off'" in text and "discover_models: false" in text


def test_memory_is_reckoned_where_the_weights_are_sampled(home: Path) -> None:
    """The product's sampler: the server and two copies of the weights; vLLM of its own: one copy, its
    processes and its KV cache (as vllm_server sizes it); a user's vLLM (trainer.vllm_url): the server only."""
    from dataclasses import replace

    from rl_mcp.serving import memory

    rec = RunStore(home / "runs.sqlite").get(RUN_ID)
    assert rec is not None
    plan = plan_serve(rec, None)
    folder = memory.model_folder("tiny-chat", {})
    assert folder is not None
    weights = memory.weight_files_bytes(folder)
    assert memory.estimate(plan, {}).bytes == memory.SERVER_BYTES + 2 * weights
    own = replace(plan, run_config={"trainer": {"sampler": "vllm", "device": "cpu"}})
    mine = memory.estimate(own, {"VLLM_CPU_KVCACHE_SPACE": "2"})
    assert mine.bytes == memory.SERVER_BYTES + weights + memory.VLLM_PROCESS_BYTES + 2 * 2**30
    assert "its KV cache (2.00 GiB)" in mine.basis, mine
    users = replace(plan, run_config={"trainer": {"sampler": "vllm", "vllm_url": "http://10.0.0.5:8000"}})
    theirs = memory.estimate(users, {})
    assert theirs.bytes == memory.SERVER_BYTES and "at http://10.0.0.5:8000 (trainer.vllm_url)" in theirs.basis
