"""Classic verifiers environments ([verifiers] items 2-3) run from their own code, in their own venv
(`make verifiers`), through the MCP tools: scored by rl_test_inference (but the SmolLM2 case, whose
groups test_verifiers_v1 scores) and trained 2 steps on the local backend, with the exact tokens the
inference server sampled and only the policy's trained.

The two environments are ours (tests/byo_envs/verifiers/): `word_count`, a SingleTurnEnv scored by a
rubric, and `adder_tools`, a ToolEnv with an `add` tool whose episodes always have two model turns.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from mcp import Client
from test_byo_atropos import call, trained_spans
from test_runs_resume_e2e import ended, wait_for
from tiny_profiles import MAX_TOKEN_LENGTH, on_tiny_chat
from transformers import AutoTokenizer

from rl_mcp.app import open_app
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import Settings
from tinker_atropos.run_files import RunFiles, read_jsonl
from tinker_atropos.venvs import CLASSIC, GENERATIONS, V1
from tinker_atropos.verifiers.sequences import PROMPT_LOGPROB, PROMPT_MASK, from_branch, from_text, sequence

pytestmark = pytest.mark.anyio
VERIFIERS_DIR = Path(__file__).parent / "byo_envs" / "verifiers"
# one evaluation, of the final weights: a rollout of a v1 tool environment starts processes of its own
SMALL = {
    "total_steps": 2,
    "group_size": 2,
    "batch_size": 4,
    "eval_size": 2,
    "eval_before_training": False,
    "max_completion_tokens": 12,
}
# per environment: the profile, its config edits, the metrics its rubric reports, model turns per
# episode. The profile runs on tiny-chat (tests/tiny_profiles.py) but for ON_SMOLLM2. tiny-chat spends
# a token per character, and a tool prompt alone is ~900 of them, past the local profile's locked
# 1024: the tool environments take the smollm2 profile's 8192.
CASES = {
    "word_count": ("local", {"num_examples": 6}, {"exact_count", "num_turns"}, 1),
    "adder_tools": ("smollm2", {"num_examples": 6, "max_turns": 2}, {"answered", "num_turns", "add_calls"}, 2),
    # verifiers-v1: a Taskset played by the `null` harness, and one whose task has a Toolset
    "echo_taskset": ("smollm2", {"num_tasks": 6}, {"echoed"}, 1),
    "adder_tools_v1": (
        "smollm2",
        {"taskset": {"num_tasks": 6, "seed": 1}, "max_turns": 2},
        {"answered", "tool_calls"},
        2,
    ),
}

V1_CASES = ("echo_taskset", "adder_tools_v1")
# SmolLM2 itself: the v1 harness renders each turn's prompt from the earlier replies' text, and only
# replies that re-tokenize as sampled (words, not tiny-chat's random bytes) make one trained sequence
ON_SMOLLM2 = ("adder_tools_v1",)


# --- a rollout's turns as sequences (pure) ----------------------------------------------------


def turn(prompt: list[int], reply: list[int]) -> dict[str, Any]:
    return {"prompt_ids": prompt, "completion_ids": reply, "completion_logprobs": [-0.5] * len(reply)}


def test_turns_that_extend_each_other_are_one_sequence_with_only_the_replies_trained() -> None:
    seq, untrained = sequence([turn([1, 2, 3], [4, 5]), turn([1, 2, 3, 4, 5, 6, 7], [8])])
    assert (seq.tokens, untrained) == ([1, 2, 3, 4, 5, 6, 7, 8], 0)
    assert seq.masks == [PROMPT_MASK] * 3 + [4, 5] + [PROMPT_MASK] * 2 + [8]  # 6, 7: the environment's turn
    assert seq.logprobs == [PROMPT_LOGPROB] * 3 + [-0.5, -0.5] + [PROMPT_LOGPROB] * 2 + [-0.5]


def test_a_turn_whose_prompt_was_rendered_differently_restarts_the_sequence_there() -> None:
    seq, untrained = sequence([turn([1, 2, 3], [4, 5]), turn([1, 2, 9, 4, 5, 6], [7])])
    assert (seq.tokens, untrained) == ([1, 2, 9, 4, 5, 6, 7], 1)
    assert seq.masks == [PROMPT_MASK] * 6 + [7]  # the earlier reply, re-rendered, is text it did not sample
    with pytest.raises(ValueError, match="2 reply tokens but 1 logprobs"):
        sequence([{"prompt_ids": [1], "completion_ids": [2, 3], "completion_logprobs": [-1.0]}])


def test_a_v1_branch_keeps_its_mask_and_its_sampled_logprobs() -> None:
    seq = from_branch([1, 2, 3, 4], [False, True, False, True], [0.0, -0.25, 0.0, -1.5])
    assert seq.masks == [PROMPT_MASK, 2, PROMPT_MASK, 4]
    assert seq.logprobs == [PROMPT_LOGPROB, -0.25, PROMPT_LOGPROB, -1.5]
    with pytest.raises(ValueError, match="2 tokens, 1 mask and 2 logprobs"):
        from_branch([1, 2], [True], [0.0, 0.0])


def test_a_rollout_retokenized_from_its_text_claims_no_sampler_logprobs() -> None:
    seq = from_text([1, 2], [3, 4])
    assert (seq.tokens, seq.masks) == ([1, 2, 3, 4], [PROMPT_MASK, PROMPT_MASK, 3, 4])
    assert seq.logprobs == []  # batches.py: the trainer scores such a sequence with its own sampler


# --- through the MCP tools --------------------------------------------------------------------


def settings(profile: str = "local", **kwargs: Any) -> Settings:
    return Settings.from_env(profile=profile, **kwargs)


async def test_a_missing_venv_is_refused_at_once_naming_the_command_that_makes_it(
    rl_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(VERIFIERS_DIR))
    monkeypatch.setenv(CLASSIC.venv_var, str(tmp_path / "no-venv"))
    async with open_app(settings()) as app, Client(build_server(app)) as client:
        await call(client, "rl_select_environment", name="word_count")
        for tool, args in (("rl_start_training", {}), ("rl_test_inference", {"num_steps": 1, "group_size": 2})):
            started = time.monotonic()
            result = await client.call_tool(tool, args)
            assert result.is_error and time.monotonic() - started < 10, tool
            message = result.content[0].text  # type: ignore[union-attr]
            assert "'word_count' cannot run" in message and "mcp-server-rl setup verifiers" in message, message
            assert str(tmp_path / "no-venv" / "bin" / "python") in message and CLASSIC.venv_var in message


def assert_the_episode_is_trained_as_sampled(tokenizer: Any, tokens: list[int], masks: list[int], episode: list) -> int:
    """Each trained span decodes to one of the episode's replies, in order, and nothing else is
    trained (the prompt, the environment's turns, the template's scaffolding); returns the spans."""
    spans = trained_spans(tokens, masks)
    replies = [m for m in episode if m["role"] == "assistant"]
    assert len(spans) == len(replies), (len(spans), replies)  # none: verifiers ended it on an empty reply
    for span, reply in zip(spans, replies):
        text = tokenizer.decode(span, skip_special_tokens=True)
        if reply.get("tool_calls"):  # a parsed call: its text is the call, not the message content
            assert reply["tool_calls"][0]["function"]["name"] in text, (text, reply)
        else:
            assert text == reply["content"], (text, reply)
    untrained = tokenizer.decode([t for t, m in zip(tokens, masks) if m == PROMPT_MASK])
    for message in episode:
        if message["role"] != "assistant":
            assert str(message["content"]) in untrained, (message, untrained)
    return len(spans)


@pytest.mark.slow
@pytest.mark.parametrize("env_name", list(CASES))
async def test_an_environment_is_scored_and_trained_from_its_own_code(
    env_name: str, rl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generation = V1 if env_name in V1_CASES else CLASSIC
    if not generation.python(os.environ).exists():
        pytest.skip(f"run `mcp-server-rl setup {generation.runtime}` first (make test does)")
    profile, edits, reported, turns = CASES[env_name]
    monkeypatch.setenv("RL_MCP_ENV_DIRS", str(VERIFIERS_DIR))
    chosen = profile if env_name in ON_SMOLLM2 else str(on_tiny_chat(profile, rl_home.parent))
    async with open_app(settings(chosen, stop_runs_on_exit=True)) as app, Client(build_server(app)) as client:
        await call(client, "rl_select_environment", name=env_name)
        for field, value in {**SMALL, "max_token_length": MAX_TOKEN_LENGTH[profile], **edits}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        if env_name not in ON_SMOLLM2:  # SmolLM2's v1 groups: test_verifiers_v1 scores them, token by token
            tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300)
            (model,) = tested["results"]
            assert model["status"] == "ok", (model["error"], model["log_tail"])
            assert len(model["step_scores"][0]) >= 2 and all(s in (0.0, 1.0) for s in model["step_scores"][0])
        run = await call(client, "rl_start_training")
        env = yaml.safe_load(Path(run["config_path"]).read_text())["env"]
        assert env["verifiers_file"] == str(VERIFIERS_DIR / f"{env_name}.py")
        assert env["verifiers_format"] == generation.format
        assert env["verifiers_args"] == edits, env  # only the edited arguments: the rest are the file's
        status = await wait_for(client, run["run_id"], ended, 420)
    assert status["status"] == "completed" and status["step"] == 2, status
    tokenizer = AutoTokenizer.from_pretrained(env["tokenizer_name"])  # the run's model stage built it
    files = RunFiles(Path(run["run_dir"]))
    first: dict[str, Any] = json.loads(files.first_batch.read_text())
    replies = [
        assert_the_episode_is_trained_as_sampled(tokenizer, tokens, masks, episode)
        for group in first["groups"]
        for tokens, masks, episode in zip(group["tokens"], group["masks"], group["messages"])
    ]
    # an empty reply ends its episode there (verifiers aborts it), at any turn
    assert len(replies) == 4 and turns in replies and set(replies) <= set(range(turns + 1)), replies
    metrics = read_jsonl(files.metrics)
    assert [m["step"] for m in metrics] == [1, 2]
    for line in metrics:  # the rubric's own metrics, logged as ours
        assert set(line["env_metrics"]) >= reported, line
        assert 0 < line["env_metrics"].get("num_turns", turns) <= turns, line
    evals = read_jsonl(files.evals)
    assert evals and all(e["num_items"] == 2 for e in evals), evals
    if env_name in ON_SMOLLM2:  # a SmolLM2 step takes seconds: time enough to tell the two apart
        # no rollout past the last step: the environment stops once the trainer has taken its batch
        # (atroposlib rolled out a whole batch more, 20 s here, before the final evaluation)
        last_group_at = json.loads(files.env_health.read_text())["last_group_at"]
        assert last_group_at < logged_at(files.log("trainer"), "serving the final weights")


def logged_at(log: Path, needle: str) -> float:
    """When the log's first line holding `needle` was written (its timestamp, this machine's time)."""
    line = next(x for x in log.read_text().splitlines() if needle in x)
    return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()


# per API generation: the package of ours (tests/byo_envs), its distribution and module names
PACKAGES = {
    "verifiers": ("verifiers_package", "vf-letter-count", "vf_letter_count"),
    "verifiers-v1": ("verifiers_v1_package", "vf-shout-v1", "vf_shout_v1"),
}


@pytest.fixture
def installed_package(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A package of ours (`request.param`: its API generation) built as a wheel and pip-installed in
    that generation's venv, as a user installs a published environment there; uninstalled afterwards."""
    generation = GENERATIONS[request.param]
    python = generation.python(os.environ)
    if not python.exists():
        pytest.skip(f"run `mcp-server-rl setup {generation.runtime}` first (make test does)")
    folder, distribution, module = PACKAGES[generation.format]
    source = shutil.copytree(Path(__file__).parent / "byo_envs" / folder, tmp_path / "source")  # builds write there
    quiet = {"check": True, "capture_output": True}
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), source],
        **quiet,
    )
    (wheel,) = tmp_path.glob("*.whl")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], **quiet)
    try:
        yield module
    finally:
        subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", distribution], **quiet)


@pytest.mark.slow
@pytest.mark.parametrize("installed_package", list(PACKAGES), indirect=True)
async def test_an_environment_installed_in_a_verifiers_venv_is_listed_and_runs(
    installed_package: str, rl_home: Path
) -> None:
    classic = installed_package == "vf_letter_count"
    # per package: its format, its description, a field of its config (name, default, edit), the profile
    env_format, description, (name, default, edit), profile = (
        ("verifiers", "Count one letter in each word, scored by exact match.", ("letter", "e", "p"), "local")
        if classic
        else (
            "verifiers-v1",
            "Write a word in capitals, scored by whether the reply holds it so.",
            ("taskset", {"num_tasks": 8}, {"num_tasks": 4}),
            "smollm2",
        )
    )
    on_tiny = str(on_tiny_chat(profile, rl_home.parent))
    async with open_app(settings(on_tiny, stop_runs_on_exit=True)) as app, Client(build_server(app)) as client:
        listed = {e["name"]: e for e in (await call(client, "rl_list_environments"))["environments"]}
        entry = listed[installed_package]
        assert entry["format"] == env_format and entry["file"].endswith(f"{installed_package}/__init__.py"), entry
        assert entry["description"] == description
        await call(client, "rl_select_environment", name=installed_package)
        fields = {f["name"]: f for f in (await call(client, "rl_get_current_config"))["fields"]}
        assert (fields[name]["section"], fields[name]["default"]) == ("verifiers", default)
        await call(client, "rl_edit_config", field=name, value=edit)
        for field, value in SMALL.items():
            await call(client, "rl_edit_config", field=field, value=value)
        tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300)
        (model,) = tested["results"]
        assert model["status"] == "ok", (model["error"], model["log_tail"])
        assert len(model["step_scores"][0]) == 2, model
        config = yaml.safe_load(Path(model["config"]).read_text())
        # loaded by module name, as installed (its relative import works), with the edited argument
        assert (config["env"]["verifiers_module"], config["env"]["verifiers_args"]) == (installed_package, {name: edit})


@pytest.mark.slow
@pytest.mark.skipif(
    not CLASSIC.python(os.environ).exists(), reason="`mcp-server-rl setup verifiers` first (make test does)"
)
async def test_episodes_longer_than_the_trainer_takes_are_named_then_fail_the_run(
    rl_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """adder_tools on tiny-chat (a token per character): two turns after a ~900-token tool prompt pass
    the local profile's locked max_token_trainer_length of 1024. atroposlib skips each such group with
    one log line; the run says so, with the fix, and fails after RL_MCP_ENV_DISCARD_GROUPS in a row and
    RL_MCP_ENV_DISCARD_TIMEOUT."""
    for name, value in {"RL_MCP_ENV_DIRS": str(VERIFIERS_DIR), "RL_MCP_STATUS_MIN_INTERVAL": "0"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("RL_MCP_ENV_DISCARD_TIMEOUT", "10")
    monkeypatch.setenv("RL_MCP_ENV_DISCARD_GROUPS", "3")
    async with open_app(settings(stop_runs_on_exit=True)) as app, Client(build_server(app)) as client:
        await call(client, "rl_select_environment", name="adder_tools")
        for field, value in {**SMALL, "max_token_length": 2048, "max_turns": 2}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        run_id = (await call(client, "rl_start_training"))["run_id"]
        finding = None
        with anyio.fail_after(300):
            while (status := await call(client, "rl_check_status", run_id=run_id))["status"] != "failed":
                assert status["status"] in ("starting", "running", "stopping"), status
                finding = finding or {f["code"]: f for f in status["findings"]}.get("groups_discarded")
                await anyio.sleep(0.5)
    assert finding is not None and "likely sequences too long" in finding["title"], finding
    # the trainer's limit is the profile's (locked): the rollouts are what to read
    step = finding["next_step"]
    assert step["tool"] == "rl_test_inference" and "max_token_trainer_length, set by the profile" in step["why"], step
    assert "fewer than 1024 (max_token_trainer_length)" in status["error"], status["error"]
