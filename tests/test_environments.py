"""The bundled environments: reward and answer checking, generated data, and one real rollout
of each through atroposlib's managed server against our inference server (tiny model)."""

from __future__ import annotations

import json
import os
from decimal import Decimal
from pathlib import Path
from typing import ClassVar

import pytest

from tinker_atropos.environments.gsm8k_data import (
    extract_answer,
    generate_problems,
    is_correct,
    load_hf_gsm8k,
)
from tinker_atropos.environments.letter_repeat import letter_reward


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("First 3 + 4 = 7.\n#### 7", "7"),
        ("The total is 1,234 apples.\n####  1,234", "1234"),
        ("She pays $12.50 in all. #### $12.50", "12.5"),
        ("It drops to -3 degrees.", "-3"),
        ("We get \\boxed{42} as the result", "42"),
        ("10 boxes of 5 is 50. #### 50.", "50"),
        ("Half of 9 is 4.5, so 4.5", "4.50"),
    ],
)
def test_gsm8k_accepts_the_right_final_number(reply: str, answer: str) -> None:
    assert is_correct(reply, answer)


@pytest.mark.parametrize(
    ("reply", "answer"),
    [
        ("#### 8 but maybe 7", "7"),  # the #### answer wins over a later number
        ("3 + 4 = 7, so the answer is 8", "7"),  # the last number, not any number
        ("I do not know.", "7"),
        ("", "0"),
        ("#### 70", "7"),
    ],
)
def test_gsm8k_rejects_a_wrong_or_missing_answer(reply: str, answer: str) -> None:
    assert not is_correct(reply, answer)


def test_extract_answer_prefers_hashes_then_boxed_then_last_number() -> None:
    assert extract_answer("1 then \\boxed{2} then #### 3 then 4") == Decimal(3)
    assert extract_answer("1 then \\boxed{2} then 4") == Decimal(2)
    assert extract_answer("1 then 2,500 then") == Decimal(2500)
    assert extract_answer("no digits") is None


def test_generated_problems_are_deterministic_varied_and_consistent() -> None:
    first, again, other = generate_problems(200, 3), generate_problems(200, 3), generate_problems(200, 4)
    assert first == again
    assert first != other
    assert len({p.question for p in first}) > 150
    for p in first:
        assert Decimal(p.answer) >= 0 and p.question.endswith("?")
        # every number the answer depends on is stated in the question
        assert any(ch.isdigit() for ch in p.question)


def test_generated_sharing_problem_has_the_right_answer() -> None:
    share = next(p for p in generate_problems(200, 0) if "equally among" in p.question)
    words = share.question.split()
    total, friends = int(words[words.index("shares") + 1]), int(words[words.index("among") + 1])
    assert Decimal(share.answer) * friends == total


def test_hf_gsm8k_offline_fails_fast(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Also in a process that imported datasets before it was told (datasets reads the variables
    once): it used to try the hub and wait out the whole timeout."""
    import datasets  # noqa: F401

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert load_hf_gsm8k(timeout=15) is None
    assert "OfflineModeIsEnabled" in caplog.text and "no answer within" not in caplog.text, caplog.text


@pytest.mark.parametrize(
    ("reply", "reward"),
    [
        ("bbbbbbbb", 1.0),  # the letter, exactly the asked count
        ("bbbb", 0.5),  # half the count
        ("bbbbbbbbbbbbbbbb", 1.0),  # running on: all target letters still score the full credit
        ("bbbbbbbb!!!!!!!!", 0.5),  # junk after it dilutes
        ("aaaaaaaa", 0.25),  # another of the task's letters
        ("zzzzzzzz", 0.05),  # any other letter
        ("12345678", 0.0),
        ("", 0.0),
        ("bbbbaaaa", (4 + 4 * 0.25) / 8),
    ],
)
def test_letter_repeat_reward(reply: str, reward: float) -> None:
    got = letter_reward(reply, "b", 8, pool="abc", pool_credit=0.25, letter_credit=0.05)
    assert got == pytest.approx(reward)  # a float64 sum of a few credits: default rel 1e-6 >> its rounding


def test_letter_repeat_reward_is_bounded_and_ordered() -> None:
    replies = ["", "x", "q", "bq", "bb", "bbbbbbbb"]
    rewards = [letter_reward(r, "b", 8, "abc", 0.25, 0.05) for r in replies]
    assert rewards == sorted(rewards) and 0.0 == rewards[0] and rewards[-1] == 1.0


@pytest.fixture(scope="module")
def inference_url():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tinker_atropos.backends.local import create_sampler, load_base_model
    from tinker_atropos.inference_server import SamplerHolder, build_app, serve_in_thread

    base = load_base_model("tiny-chat", "cpu")
    handle = serve_in_thread(
        build_app(SamplerHolder(create_sampler(base)), "tiny-chat", base.tokenizer), "127.0.0.1", 0
    )
    yield handle.url
    handle.stop()


def _env(cls, url: str, eval_dir: Path, **overrides):
    config, servers = cls.config_init()
    assert config.wandb_name == cls.name
    servers[0].base_url = f"{url}/v1"
    for key, value in {"data_dir_to_save_evals": str(eval_dir), **overrides}.items():
        setattr(config, key, value)
    return cls(config, servers)


async def _close(env) -> None:
    """Stop the health-check task and close the HTTP client in the loop that opened them."""
    for server in env.server.servers:
        if server.check_task is not None:
            server.check_task.cancel()
        await server.openai.close()


@pytest.mark.anyio
async def test_letter_repeat_rollout_and_eval_through_the_managed_server(inference_url, tmp_path: Path) -> None:
    from tinker_atropos.environments.letter_repeat import LetterRepeatEnv

    env = _env(LetterRepeatEnv, inference_url, tmp_path, group_size=4, eval_size=3)
    try:
        await env.setup()
        item = await env.get_next_item()
        assert item.answer in env.config.letters and item.answer in item.prompt
        group, backlog = await env.collect_trajectories(item)
        env.curr_step = 7
        await env.evaluate()
    finally:
        await _close(env)
    assert backlog == [] and len(group["tokens"]) == 4
    for tokens, masks, logprobs, score, override in zip(
        group["tokens"], group["masks"], group["inference_logprobs"], group["scores"], group["overrides"]
    ):
        assert len(tokens) == len(masks) == len(logprobs)
        reply = [t for t, m in zip(tokens, masks) if m != -100]
        assert 1 <= len(reply) <= env.config.max_completion_tokens
        assert all(lp < 0 for lp, m in zip(logprobs, masks) if m != -100)  # real sampler logprobs
        text = env.tokenizer.decode(reply, skip_special_tokens=True)
        assert score == pytest.approx(env.score(item, text).reward)  # one float64 reward, maybe via JSON
        assert override == {"correct": text == item.answer * env.config.repeat_count}
    line = json.loads((tmp_path / "eval.jsonl").read_text().splitlines()[-1])
    assert line["step"] == 7 and line["num_items"] == 3 and 0.0 <= line["eval_accuracy"] <= 1.0
    assert 0.0 < line["seconds"] < 120


@pytest.mark.anyio
async def test_gsm8k_offline_uses_generated_problems_and_scores_replies(
    inference_url, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tinker_atropos.environments.gsm8k_tinker import Gsm8kTinkerEnv

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    env = _env(
        Gsm8kTinkerEnv,
        inference_url,
        tmp_path,
        group_size=2,
        max_completion_tokens=16,
        eval_size=2,
        hf_timeout=15,
        num_generated=50,
    )
    try:
        await env.setup()
        generated = [p.question for p in generate_problems(50, 0)]
        validation = {t.prompt for t in env.validation_tasks}  # drawn from the pool, then not trained on
        assert len(validation) == 2 and [t.prompt for t in env.train_tasks] == [
            q for q in generated if q not in validation
        ]
        item = await env.get_next_item()
        group, _ = await env.collect_trajectories(item)
        await env.evaluate()
    finally:
        await _close(env)
    assert len(group["tokens"]) == 2 and group["scores"] == [0.0, 0.0]  # random weights: wrong
    assert env.score(item, f"so the answer is\n#### {item.answer}").correct
    assert json.loads((tmp_path / "validation.jsonl").read_text())["num_items"] == 2  # the periodic evaluation


@pytest.mark.anyio
async def test_openai_only_endpoint_is_scored_from_reply_text(inference_url, tmp_path: Path) -> None:
    """`process` against a hosted model: no token API, so no logprobs, but real scores."""
    from tinker_atropos.environments.letter_repeat import LetterRepeatEnv

    config, servers = LetterRepeatEnv.config_init()
    servers[0].server_type = "openai"
    servers[0].base_url = f"{inference_url}/v1"
    config.group_size = 3
    env = LetterRepeatEnv(config, servers)
    try:
        await env.setup()
        item = await env.get_next_item()
        group, _ = await env.collect_trajectories(item)
    finally:
        await _close(env)
    assert "inference_logprobs" not in group and len(group["tokens"]) == 3
    for tokens, masks, score in zip(group["tokens"], group["masks"], group["scores"]):
        reply = [t for t, m in zip(tokens, masks) if m != -100]
        assert tokens[: len(tokens) - len(reply)] == env.tokenizer.encode(
            env.tokenizer.apply_chat_template(env.messages(item), tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )
        assert score == pytest.approx(env.score(item, env.tokenizer.decode(reply)).reward)  # float64, as above


def test_atroposlib_has_the_one_start_pause_run_env_skips() -> None:
    """atropos_compat makes exactly atroposlib's post-registration pause return at once; if
    atroposlib changes it (or adds another sleep of that length), this says so."""
    import inspect

    import atroposlib.envs.base as atropos_base

    from tinker_atropos.env_process.atropos_compat import ATROPOS_START_PAUSE_S

    pause = f"asyncio.sleep({ATROPOS_START_PAUSE_S})"
    assert inspect.getsource(atropos_base).count(pause) == 1
    assert pause in inspect.getsource(atropos_base.BaseEnv.env_manager)


def _upstream_echo_word(url: str, eval_dir: Path, **overrides):
    """examples/atropos_envs' echo_word, a plain atroposlib BaseEnv, after the fixes the launcher
    applies, pointed at the tiny model's server."""
    import importlib.util

    from tinker_atropos.env_process import atropos_compat
    from tinker_atropos.environments.common import local_server_defaults

    atropos_compat.apply()
    path = Path(__file__).resolve().parents[1] / "examples" / "atropos_envs" / "single_turn.py"
    spec = importlib.util.spec_from_file_location("upstream_single_turn", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config, _ = module.EchoWordEnv.config_init()
    servers = local_server_defaults()
    servers[0].base_url = f"{url}/v1"
    fields = {"tokenizer_name": servers[0].tokenizer_name, "data_dir_to_save_evals": str(eval_dir), **overrides}
    for key, value in fields.items():
        setattr(config, key, value)
    return module.EchoWordEnv(config, servers)


@pytest.mark.anyio
@pytest.mark.parametrize("shape", ["bundled", "upstream"])
async def test_environment_joins_its_run_and_rolls_out_without_atroposlibs_start_pause(
    shape: str, inference_url, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against a real run-api, started after the environment (as rl-mcp spawns them together):
    registration waits for run-api, then for the trainer's first batch request, then goes
    through, and env_manager's first groups reach run-api's queue sooner than atroposlib's fixed
    5 s pause after registration would allow (a tiny-chat group takes well under 1 s). For a
    bundled environment (RunEnv) and a user's plain atroposlib one (atropos_compat's fixes).
    atroposlib's own three tries wait 0.2 s apart here (up to 2 + 4 s in atroposlib): they are
    over well before run-api starts, as on a machine where run-api is slow to listen."""
    import time

    import anyio
    import httpx
    import tenacity
    from atroposlib.envs.base import BaseEnv
    from test_trainer_e2e import free_port, start_run_api

    from tinker_atropos.env_process.atropos_compat import ATROPOS_START_PAUSE_S
    from tinker_atropos.environments.letter_repeat import LetterRepeatEnv
    from tinker_atropos.trainer.run_api_client import Registration, RunApiClient

    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    api = None
    fields = {"rollout_server_url": api_url, "group_size": 4, "batch_size": 8, "total_steps": 3}
    if shape == "bundled":
        env = _env(LetterRepeatEnv, inference_url, tmp_path, eval_before_training=False, **fields)
    else:
        env = _upstream_echo_word(inference_url, tmp_path, **fields)
    trainer = RunApiClient(api_url)
    # tenacity's, shared by atropos_compat's wrapper
    monkeypatch.setattr(BaseEnv._register_env.retry, "wait", tenacity.wait_fixed(0.2))
    try:
        async with anyio.create_task_group() as tg, httpx.AsyncClient() as http:
            tg.start_soon(env.env_manager)
            # no run-api yet, for longer than atroposlib's own three tries take
            await anyio.sleep(1.5)
            api = start_run_api(port, tmp_path / "api.log")
            await anyio.sleep(1.0)
            assert not hasattr(env, "env_id")  # run-api holds it: no trainer yet
            await trainer.register(Registration("g", "p", 8, 256, str(tmp_path), 1, 0, 3), timeout_s=10)
            assert (await http.get(f"{api_url}/batch")).json()["batch"] is None  # the trainer has started
            started = time.monotonic()
            with anyio.fail_after(60):
                while (await http.get(f"{api_url}/status")).json()["queue_size"] == 0:
                    await anyio.sleep(0.05)
            assert env.env_id == 0
            assert time.monotonic() - started < ATROPOS_START_PAUSE_S - 1
            tg.cancel_scope.cancel()
    finally:
        for worker in env.workers:
            worker.cancel()
        await trainer.aclose()
        await _close(env)
        if api is not None:
            api.kill()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("every", "old", "new", "evaluated"),
    [
        (1, 0, 1, True),  # atroposlib's `old % 1 > new % 1` is never true: no periodic eval at all
        (2, 2, 4, True),  # a poll that lands on a multiple: 0 > 0
        (3, 2, 7, True),  # a jump past one (6) that lands on 7: 2 > 1 is true, atroposlib's own eval
        (4, 1, 7, True),  # past 4, landing at 7: 1 > 3 is false
        (2, 4, 5, False),  # no multiple crossed
    ],
)
async def test_an_eval_runs_at_every_multiple_of_steps_per_eval_a_step_crosses(
    inference_url, tmp_path: Path, every: int, old: int, new: int, evaluated: bool
) -> None:
    from tinker_atropos.environments.letter_repeat import LetterRepeatEnv

    env = _env(LetterRepeatEnv, inference_url, tmp_path, group_size=2, eval_size=2, steps_per_eval=every)
    try:
        await env.setup()
        env.curr_step, env.status_dict = old, {"current_step": new}
        await env.env_step_checks()
        assert env.curr_step == new and (env.eval_runner is not None) == evaluated
        if evaluated:
            await env.eval_runner
            await env.env_step_checks()  # the same step polled again: no second evaluation
    finally:
        await _close(env)
    lines = (tmp_path / "eval.jsonl").read_text().splitlines() if evaluated else []
    assert [json.loads(line)["step"] for line in lines] == ([new] if evaluated else [])


@pytest.mark.anyio
async def test_a_group_begins_with_a_probe_where_its_item_last_tied(inference_url, tmp_path: Path) -> None:
    """Real replies from the tiny model, scored as a script says: a probe that ties stops the group
    before the rest is sampled; one whose replies differ is joined by the rest, one group of the
    sampler's tokens and logprobs; an item whose last group taught, or an environment that sends its
    ties to the trainer, is sampled whole."""
    from tinker_atropos.environments.common import Score
    from tinker_atropos.environments.letter_repeat import LetterRepeatEnv

    class ScriptedScores(LetterRepeatEnv):
        script: ClassVar[list[float]] = []
        sent: ClassVar[list[dict]] = []

        def score(self, task, reply: str) -> Score:
            reward = self.script.pop(0)
            return Score(reward, reward >= 1.0)

        async def _send_scored_data_to_api(self, scored_data) -> None:  # what run-api would be sent
            self.sent.append(scored_data)

    env = _env(
        ScriptedScores, inference_url, tmp_path, group_size=4, item_window=2, probe_replies=2, max_completion_tokens=4
    )

    async def roll(item, scores: list[float]) -> None:
        env.script[:] = scores
        env.running_items["u"] = {"item": item}
        await env.handle_env("u")
        assert env.script == [], "the group sampled another number of replies than scored"

    try:
        await env.setup()
        solved, taught = await env.get_next_item(), await env.get_next_item()
        await roll(solved, [1.0] * 4)  # an item's first group: whole, tied (dropped)
        await roll(solved, [1.0, 1.0])  # its last group tied: a probe of 2, tied: stopped there
        await roll(taught, [1.0] * 4)
        await roll(taught, [1.0, 0.0, 0.0, 1.0])  # a probe whose replies differ, then the other 2
        await roll(taught, [0.0, 1.0, 1.0, 1.0])  # its last group taught: whole at once
        env.config.ensure_scores_are_not_same = False  # the trainer counts ties: no probe
        await roll(solved, [1.0] * 4)
    finally:
        await _close(env)
    ledger = env.item_draw.ledger
    assert (ledger.groups, ledger.probes, ledger.probes_stopped) == (6, 2, 1)
    assert ledger.counts(None)["retired"] == 1 and ledger.tied_reply_tokens < ledger.reply_tokens
    probed, whole, sent_tie = env.sent
    assert probed["scores"] == [1.0, 0.0, 0.0, 1.0] and whole["scores"] == [0.0, 1.0, 1.0, 1.0]
    assert sent_tie["scores"] == [1.0] * 4
    for key in ("tokens", "masks", "inference_logprobs", "overrides"):
        assert len(probed[key]) == 4, key
    assert all(
        len(t) == len(m) == len(lp) for t, m, lp in zip(probed["tokens"], probed["masks"], probed["inference_logprobs"])
    )
    items = json.loads((tmp_path / "items.json").read_text())
    assert (items["probes"], items["probes_stopped"], items["retired"]) == (2, 1, 1)
