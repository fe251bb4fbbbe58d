"""On-policy distillation (trainer.teacher): the signal against hand-computed values, a teacher refused
for its tokenizer before anything starts, and a run on the local backend distilling an adapter trained
here, its KL to the teacher falling."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from mcp import Client
from test_runs_mcp import call, environ, serving, wait_status
from tinker import types

from rl_mcp.diagnosis.distill_rules import teacher_kl_flat, teacher_no_better
from rl_mcp.diagnosis.facts import RunFacts
from rl_mcp.diagnosis.rules import no_reward_signal
from tinker_atropos.distill.signal import with_teacher_signal
from tinker_atropos.distill.tokenizers import tokenizer_mismatch
from tinker_atropos.models.paths import TINY_CHAT, model_dir
from tinker_atropos.run_files import RunFiles, read_jsonl


def datum(logprobs: list[float], advantages: list[float]) -> types.Datum:
    n = len(logprobs)
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(range(n))),
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(np.arange(1, n + 1, dtype=np.int64)),
            "logprobs": types.TensorData.from_numpy(np.asarray(logprobs, dtype=np.float32)),
            "advantages": types.TensorData.from_numpy(np.asarray(advantages, dtype=np.float32)),
        },
    )


def test_the_signal_is_the_hand_computed_one() -> None:
    # two prompt targets, then three reply targets (an agent's multi-turn reply would mask the tool's too)
    d = datum([0.0, 0.0, -1.0, -2.0, -0.5], [0.0, 0.0, 0.5, 0.5, 0.5])
    mask = np.array([False, False, True, True, True])
    teacher = np.array([-9.0, -9.0, -0.5, -3.0, np.nan])  # the last token left unscored: no signal on it
    (out,), stats = with_teacher_signal([d], [mask], [teacher], distill_coef=2.0, reward_coef=0.5)
    advantages = out.loss_fn_inputs["advantages"].to_numpy()
    # 0.5 x 0.5 + 2 x (teacher - student): 0.25 + 2 x 0.5, 0.25 + 2 x -1, and 0.5 x 0.5 alone
    assert advantages.tolist() == pytest.approx([0.0, 0.0, 1.25, -1.75, 0.25])
    assert stats.kl == pytest.approx((-0.5 + 1.0) / 2) and stats.teacher_logprob == pytest.approx(-1.75)
    # pure distillation: the reward's advantage gone, the prompt untouched
    (pure,), _ = with_teacher_signal([d], [mask], [teacher], distill_coef=1.0, reward_coef=0.0)
    assert pure.loss_fn_inputs["advantages"].to_numpy().tolist() == pytest.approx([0.0, 0.0, 0.5, -1.0, 0.0])


def test_a_teacher_with_another_tokenizer_is_told_apart() -> None:
    assert tokenizer_mismatch(TINY_CHAT, TINY_CHAT, backend="local") is None
    assert "tokenizers of their own" in str(tokenizer_mismatch(TINY_CHAT, "smollm2-135m", backend="local"))
    assert tokenizer_mismatch("Qwen/Qwen3-8B", "Qwen/Qwen3-30B-A3B", backend="tinker") is None
    assert "not known to share" in str(tokenizer_mismatch("Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B", backend="tinker"))


def test_the_findings_name_a_weak_teacher_and_a_flat_kl() -> None:
    evals = [{"step": 0, "eval_accuracy": 0.5}]
    weak = RunFacts("r", [], evals, teacher={"run_id": "t", "held_out_accuracy": 0.4})
    found = teacher_no_better(weak)
    assert found is not None and "0.400" in found.title and found.next_step.arguments["field"] == "teacher"
    assert teacher_no_better(RunFacts("r", [], evals, teacher={"run_id": "t", "held_out_accuracy": 0.7})) is None
    flat = [{"step": s, "teacher_kl": 0.8 + 0.01 * (s % 2)} for s in range(1, 9)]
    falling = [{"step": s, "teacher_kl": 0.8 / s} for s in range(1, 9)]
    tinker = {"learning_rate": 1e-3, "distill_coef": 1.0}
    kl = teacher_kl_flat(RunFacts("r", flat, [], trainer=tinker))
    assert kl is not None and kl.next_step.arguments == {"field": "learning_rate", "value": 2e-3}
    assert teacher_kl_flat(RunFacts("r", falling, [], trainer=tinker)) is None
    # every group tied: no reward signal, unless a teacher's signal trains them
    tied = [{"step": s, "no_signal_share": 1.0, "time": 1000.0 + s} for s in range(1, 9)]
    assert no_reward_signal(RunFacts("r", tied, [], trainer={"learning_rate": 1e-3})) is not None
    assert no_reward_signal(RunFacts("r", tied, [], trainer={**tinker, "teacher": "t"})) is None


@pytest.mark.anyio
async def test_a_teacher_with_another_tokenizer_is_refused_before_anything_starts(tmp_path: Path) -> None:
    other = tmp_path / "other-tokenizer"  # tiny-chat's weights with a vocabulary of its own
    shutil.copytree(model_dir(TINY_CHAT), other)
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[100:102]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    home = tmp_path / "home"
    async with serving(environ(home)) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="letter_repeat")
        await call(client, "rl_edit_config", field="teacher", value=str(other))
        refused = await client.call_tool("rl_start_training", {})
        text = refused.content[0].text  # type: ignore[union-attr]
        assert refused.is_error and "tokenizer" in text and str(other) in text, text
        assert (await call(client, "rl_list_runs"))["runs"] == []
        assert not (home / "runs").exists() or not any((home / "runs").iterdir())  # no run folder either


@pytest.mark.anyio
async def test_a_run_distills_an_adapter_trained_here_and_its_kl_falls(tmp_path: Path) -> None:
    async with serving(environ(tmp_path / "home")) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="arithmetic")
        # rollouts at most one step behind the weights: the student's updates reach its samples at once
        small = {"group_size": 4, "batch_size": 16, "max_batches_offpolicy": 1}
        for field, value in {**small, "total_steps": 8, "learning_rate": 1e-2}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        teacher = await call(client, "rl_start_training")
        done = await wait_status(client, teacher["run_id"], {"completed", "failed"}, timeout=300)
        assert done["status"] == "completed", done

        edits = {
            "teacher": teacher["run_id"],
            "reward_coef": 0.0,
            "total_steps": 12,
            "batch_size": 32,
            "learning_rate": 2e-3,  # 3e-3 fell then rose again once in a loaded full suite (KL 0.10 -> 2.7)
            "lr_schedule": "linear",
        }
        for field, value in edits.items():
            await call(client, "rl_edit_config", field=field, value=value)
        run = await call(client, "rl_start_training")
        done = await wait_status(client, run["run_id"], {"completed", "failed"}, timeout=300)
        assert done["status"] == "completed", done
        run_dir = Path(run["run_dir"])
        config = yaml.safe_load(Path(run["config_path"]).read_text())["trainer"]
        described = json.loads(RunFiles(run_dir).teacher.read_text())
        assert described["run_id"] == teacher["run_id"] and config["teacher"] == described["ref"]
        assert Path(config["teacher"]).is_dir() and Path(config["teacher"]).is_relative_to(teacher["run_dir"])
        kl = [m["teacher_kl"] for m in read_jsonl(RunFiles(run_dir).metrics)]
        assert len(kl) == 12 and all(v is not None for v in kl), kl
        assert np.mean(kl[-3:]) < 0.5 * np.mean(kl[:3]), kl
        assert done["latest"]["teacher_kl"] == kl[-1] and done["latest"]["teacher_logprob"] < 0

        # beside the RL run that taught it: the KL figures, and the fields that made it distillation
        compared = await call(client, "rl_compare_runs", run_ids=[teacher["run_id"], run["run_id"]])
        rl, distilled = compared["runs"]
        assert rl["teacher_kl_first"] is None and distilled["teacher_kl_last"] == kl[-1]
        differing = {d["field"] for d in compared["config_differences"]}
        assert {"trainer.teacher", "trainer.reward_coef"} <= differing, differing

        # a resume goes on with its teacher
        resumed = await call(client, "rl_start_training", resume_from=run["run_id"], total_steps=13)
        await call(client, "rl_stop_training", run_id=resumed["run_id"])
        assert json.loads(RunFiles(Path(resumed["run_dir"])).teacher.read_text()) == described


@pytest.mark.anyio
async def test_the_engine_scores_many_replies_at_once_as_it_scores_each() -> None:
    """A teacher on the local engine scores a step's replies in padded passes: the same logprobs as one
    forward per reply, in any order of lengths, across more than one pass."""
    from tinker_atropos.backends.local import batching, create_sampler, load_base_model

    sampler = create_sampler(load_base_model(TINY_CHAT, "cpu"))
    rng = np.random.default_rng(0)
    prompt, other = rng.integers(3, 200, size=9).tolist(), rng.integers(3, 200, size=4).tolist()
    replies = [rng.integers(3, 200, size=n).tolist() for n in (7, 1, 30, 12, 19)]
    rows = [prompt + r for r in replies] + [other + replies[0], [5], other[:2]]  # two groups; too short; one token
    starts = [len(prompt)] * len(replies) + [len(other), 1, 1]
    prompts = [types.ModelInput.from_ints(r) for r in rows]
    alone = [await sampler.compute_logprobs_async(p) for p in prompts]
    pass_tokens, batching.SCORE_PASS_TOKENS = batching.SCORE_PASS_TOKENS, 40  # several passes a group
    try:
        together = await sampler.compute_logprobs_many_async(prompts, starts)
    finally:
        batching.SCORE_PASS_TOKENS = pass_tokens
    for one, many, start in zip(alone, together, starts, strict=True):
        assert len(many) == len(one) and all(v is None for v in many[:start]), many
        assert many[start:] == pytest.approx(one[start:], abs=1e-4)
