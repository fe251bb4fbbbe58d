"""hermes-tasks (#87): Hermes task sets trained inside hermes-agent 0.19 itself (the `hermes` runtime,
`.runtimes/hermes`), each rollout a real `hermes -z` in the rollout's bwrap sandbox against the run's
inference server, trained on the tokens that server recorded for the episode.

- a task file with a bad item is listed as unusable and refused at select, naming the item and the field;
- Hermes' fixed prompt is measured before the first episode: on tiny-chat (a token a byte, 1024 positions)
  the start fails with the figures and the fix;
- a 2-step run of a 2-item set on SmolLM2 through the real hermes-agent, on the local backend: its steps
  trained on the episodes' recorded tokens (each sequence's trained positions are ids the server sampled:
  tests/test_episode_tokens.py proves the identity on the trainer's own datums), the merge metric in
  metrics.jsonl, and no hermes process or HERMES_HOME left once it ended;
- after rl_stop_training mid-episode, a server exit with --stop-runs-on-exit and a SIGKILL of the
  environment process, no hermes process is left.

Skipped only when `.runtimes/hermes` is absent (`make hermes` makes it).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client
from test_hermes import HERMES
from test_runs_mcp import call, environ, serving, wait_status

from tinker_atropos.agent.sandboxes.base import PREFIX as SANDBOX_PREFIX

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(not HERMES.exists(), reason="Hermes not installed: `make hermes` makes it"),
]

RUNTIMES = Path(__file__).resolve().parents[1] / ".runtimes"
# `todo` alone: Hermes' prompt is 1.6k SmolLM2 tokens (file 2.8k, terminal,file 4.6k), what every episode
# prefills and every training sequence holds. Scored by the folder's score.py, which alternates 1 and 0:
# every group of two is mixed, so each step trains (a test of the path, not of the task).
TWO_TASKS = """\
description: two lists to keep
toolsets: [todo]
max_turns: 1
episode_timeout_s: 300
items:
  - id: milk
    prompt: Add "buy milk" to your todo list.
  - id: call
    prompt: Add "call the bank" to your todo list.
"""
ALTERNATE = """\
import itertools

_next = itertools.cycle([1.0, 0.0])


async def score(item, episode, sandbox):
    assert (await sandbox.run("pwd")).exit_code == 0 and episode.key.startswith("episode-")
    return next(_next)
"""
FAST = {"group_size": 2, "batch_size": 2, "max_turn_tokens": 32, "eval_before_training": False}


def task_dirs(root: Path) -> Path:
    """An env dir holding two task sets: `two` (scored by its score.py) and `bad` (no check, no score.py)."""
    for name in ("two", "bad"):
        (root / "envs" / name).mkdir(parents=True)
        (root / "envs" / name / "hermes-tasks.yaml").write_text(TWO_TASKS)
    (root / "envs" / "two" / "score.py").write_text(ALTERNATE)
    return root / "envs"


def hermes_env(home: Path, profile: str) -> dict[str, str]:
    return environ(home, RL_MCP_RUNTIMES=str(RUNTIMES), RL_MCP_PROFILE=profile, RL_MCP_ENV_DIRS=str(task_dirs(home)))


def run_tmpdir(run_dir: Path) -> Path:
    """The TMPDIR of the run's processes (its link's target), where the episodes' sandboxes and homes lie."""
    return Path(os.readlink(run_dir / "tmp"))


def hermes_procs(tmpdir: Path) -> list[psutil.Process]:
    """The hermes-agent processes of one run: those whose HERMES_HOME lies in its TMPDIR (other tests' Hermes,
    running beside this one, have homes of their own)."""
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if not (any(str(RUNTIMES / "hermes") in part for part in cmd[:2]) and "-z" in cmd):
            continue
        try:
            home = proc.environ().get("HERMES_HOME", "")
        except psutil.Error:
            continue
        if home.startswith(str(tmpdir) + os.sep):
            out.append(proc)
    return out


def hermes_homes(tmpdir: Path) -> list[Path]:
    return [Path(p.environ()["HERMES_HOME"]) for p in hermes_procs(tmpdir)]


def sandbox_dirs(run_dir: Path) -> list[Path]:
    """The episodes' sandboxes (their HERMES_HOME inside) left in the run's temp folder (its processes' TMPDIR)."""
    return sorted((run_dir / "tmp").glob(SANDBOX_PREFIX + "*"))


async def start(client: Client, environment: str, **edits: Any) -> str:
    await call(client, "rl_select_environment", name=environment)
    for field, value in {**FAST, **edits}.items():
        await call(client, "rl_edit_config", field=field, value=value)
    return (await call(client, "rl_start_training"))["run_id"]


async def no_hermes_within(tmpdir: Path, seconds: float) -> None:
    with anyio.fail_after(seconds):
        while hermes_procs(tmpdir):
            await anyio.sleep(0.2)


async def tmpdir_of(run_dir: Path) -> Path:
    """The run's TMPDIR, once its processes have one (their start makes it)."""
    with anyio.fail_after(120):
        while not (run_dir / "tmp").is_symlink():
            await anyio.sleep(0.2)
    return run_tmpdir(run_dir)


async def test_a_bad_item_is_listed_unusable_and_refused_at_select(rl_home: Path) -> None:
    async with serving(hermes_env(rl_home, "local")) as (_, server), Client(server) as client:
        listed = {e["name"]: e for e in (await call(client, "rl_list_environments"))["environments"]}
        bundled = {"hermes-tasks:terminal_test", "hermes-tasks:computed_file", "hermes-tasks:two"}
        assert bundled <= set(listed) and all(listed[n]["format"] == "hermes-tasks" for n in bundled)
        assert "2 training items, 0 held out; toolsets todo" in listed["hermes-tasks:two"]["description"]
        assert listed["hermes-tasks:bad"]["description"].startswith("unusable: ")
        refused = await client.call_tool("rl_select_environment", {"name": "hermes-tasks:bad"})
        said = refused.content[0].text  # type: ignore[union-attr]
        assert refused.is_error and "item 1 ('milk'): check: missing, and the folder has no score.py" in said, said
        selected = await call(client, "rl_select_environment", name="hermes-tasks:two")
        fields = {f["name"] for f in selected["config"]["fields"]}
        assert "max_turn_tokens" in fields and not fields & {"enabled_toolsets", "max_agent_turns", "tasks_folder"}


async def test_hermes_prompt_that_leaves_no_reply_room_is_refused_with_figures(rl_home: Path) -> None:
    """tiny-chat spends a token a byte: Hermes' 1.6k-token prompt (todo) is ~7k of them, in 1024 positions."""
    async with serving(hermes_env(rl_home, "local")) as (_, server), Client(server) as client:
        run_id = await start(client, "hermes-tasks:two", max_token_length=1024)
        tmpdir = await tmpdir_of(rl_home / "runs" / run_id)
        failed = await wait_status(client, run_id, {"failed"}, timeout=240, poll=1)
        log = (rl_home / "runs" / run_id / "logs" / "env.log").read_text()
    said = log[log.index("PromptDoesNotFit") :]
    assert "Hermes' fixed prompt with toolsets todo is " in said and "1024-token context" in said, said
    assert "give the task set fewer toolsets" in said and "longer context" in said
    assert "env" in failed["error"]
    assert hermes_procs(tmpdir) == []


async def test_two_steps_trained_in_hermes_on_the_tokens_it_sampled(rl_home: Path) -> None:
    async with serving(hermes_env(rl_home, "smollm2")) as (_, server), Client(server) as client:
        run_id = await start(client, "hermes-tasks:two", total_steps=2)
        run_dir = rl_home / "runs" / run_id
        tmpdir = await tmpdir_of(run_dir)
        done = await wait_status(client, run_id, {"completed", "failed"}, timeout=900, poll=2)
        assert done["status"] == "completed", done
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        hermes = step["env_metrics"]
        assert hermes["hermes_episodes_left_out"] == 0 and hermes["hermes_failed_share"] == 0, step
        assert (
            0 <= hermes["hermes_merged"] <= 1 and "hermes_swapped" in hermes and "hermes_sequences_left_out" in hermes
        )
    log = (run_dir / "logs" / "env.log").read_text()
    assert "Hermes' fixed prompt: " in log and " of 8192" in log
    assert hermes_procs(tmpdir) == [] and not tmpdir.exists() and sandbox_dirs(run_dir) == []


@pytest.mark.parametrize("how", ["rl_stop_training", "exit", "sigkill_env"])
async def test_no_hermes_left_after_a_stop(rl_home: Path, how: str) -> None:
    async with serving(hermes_env(rl_home, "smollm2")) as (_, server), Client(server) as client:
        run_id = await start(client, "hermes-tasks:two", total_steps=5)
        tmpdir = await tmpdir_of(rl_home / "runs" / run_id)
        with anyio.fail_after(240):
            while not hermes_procs(tmpdir):
                await anyio.sleep(0.2)
        homes = hermes_homes(tmpdir)
        assert homes, "a Hermes runs with no HERMES_HOME of the run's"
        if how == "rl_stop_training":
            await call(client, "rl_stop_training", run_id=run_id)
            await no_hermes_within(tmpdir, 30)
        elif how == "sigkill_env":
            status = await call(client, "rl_check_status", run_id=run_id)
            (env_pid,) = [p["pid"] for p in status["processes"] if p["name"] == "env"]
            os.kill(env_pid, signal.SIGKILL)
            await no_hermes_within(tmpdir, 30)
        if how != "exit":
            await wait_status(client, run_id, {"stopped", "failed"}, timeout=60)
    await no_hermes_within(tmpdir, 30)  # `exit`: the server's exit stops the run (--stop-runs-on-exit)
    # the episodes' homes lie in the run's TMPDIR, removed once the run is settled
    assert not any(h.exists() for h in homes) and not tmpdir.exists()


def test_failed_and_cut_episodes_are_a_finding_that_points_at_the_environment_log() -> None:
    from test_diagnosis import by_code, facts, rows

    from rl_mcp.diagnosis.rules import diagnose

    shares = {"hermes_failed_share": 0.5, "hermes_timed_out_share": 0.0, "hermes_episodes_left_out": 0.0}
    found = by_code(diagnose(facts(rows(2, reward_mean=0.0, env_metrics=shares))))["hermes_episodes_failed"]
    assert found.next_step.call.startswith("resources/read(uri='rl://runs/") and "stderr tail" in found.next_step.why
    assert [e.metric for e in found.evidence] == ["hermes_failed_share"]
    clean = {**shares, "hermes_failed_share": 0.0}
    assert "hermes_episodes_failed" not in by_code(diagnose(facts(rows(2, reward_mean=0.0, env_metrics=clean))))
