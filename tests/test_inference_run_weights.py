"""rl_test_inference(run_id): a run's trained adapter, served on this machine beside its base model.

The run here is trained for real (the local backend, a supervised nudge towards "qqqqqqqq" on the
letter_repeat prompt), its sampler weights saved through the checkpoint store, and recorded in the
registry as a completed run: the test must show the adapter's answers, not the base model's.
"""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest
import torch
import yaml
from mcp import Client
from test_runs_mcp import call, environ, serving
from tinker import types

from rl_mcp.inference.run_weights import ModelsAsked, chosen_target
from rl_mcp.inference.target import InferenceTestError
from rl_mcp.runs.store import RunRecord, RunStore
from tinker_atropos.backends.local import LocalTrainingClient, load_base_model
from tinker_atropos.run_files import RunFiles

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

RUN_ID = "letter_repeat-trained-q"
TRAIN_STEPS = 40


def _train_run(home: Path) -> None:
    """A completed run whose step-000040 adapter answers the letter_repeat prompt with q's."""
    files = RunFiles(home / "runs" / RUN_ID)
    files.logs_dir.mkdir(parents=True)
    files.config.write_text(yaml.safe_dump({"trainer": {"backend": "local", "base_model": "tiny-chat"}}))
    base = load_base_model("tiny-chat", "cpu")
    client = LocalTrainingClient(base, rank=8, run_dir=files.run_dir, run_name=RUN_ID, seed=0)
    prompt = base.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Repeat this letter 8 times: q"}], tokenize=False, add_generation_prompt=True
    )
    tokens = base.tokenizer.encode(prompt + "qqqqqqqq<|im_end|>", add_special_tokens=False)
    n_prompt = len(base.tokenizer.encode(prompt, add_special_tokens=False))
    weights = torch.zeros(len(tokens) - 1)
    weights[n_prompt - 1 :] = 1.0
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": torch.tensor(tokens[1:]), "weights": weights},
    )
    for _ in range(TRAIN_STEPS):
        client.forward_backward([datum], "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=1e-2))
    client.save_weights_for_sampler(f"step-{TRAIN_STEPS:06d}")
    store = RunStore(home / "runs.sqlite")
    store.insert(
        RunRecord(
            run_id=RUN_ID, environment="letter_repeat", profile="local", status="completed",
            run_dir=str(files.run_dir), config_path=str(files.config), run_name=RUN_ID,
            total_steps=TRAIN_STEPS, api_port=1, inference_port=2, created_at=time.time(), ended_at=time.time(),
        )
    )  # fmt: skip
    store.close()


async def test_a_run_s_weights_answer_beside_the_base_model(rl_home: Path) -> None:
    _train_run(rl_home)
    async with serving(environ(rl_home)) as (_, server), Client(server) as client:
        await call(client, "rl_select_environment", name="letter_repeat")
        await call(client, "rl_edit_config", field="letters", value="q")
        answer = await call(client, "rl_test_inference", run_id=RUN_ID, num_steps=1, group_size=4, timeout_s=300)
        base, trained = answer["results"]
        assert base["model"] == "tiny-chat" and trained["model"] == f"{RUN_ID}@step-{TRAIN_STEPS:06d}"
        assert base["status"] == trained["status"] == "ok", (base["error"], trained["error"])
        comparison = answer["run_comparison"]
        assert comparison["checkpoint_step"] == TRAIN_STEPS and comparison["base_model"] == "tiny-chat"
        assert Path(comparison["weights"]).is_dir()
        # the adapter writes q's (reward near 1), the random base model bytes (reward near 0)
        assert trained["mean_score"] > base["mean_score"] + 0.3
        assert comparison["trained_mean_score"] == trained["mean_score"] and comparison["accuracy_delta"] is not None
        assert "qqqq" in trained["samples"][0]["completion"]  # the adapter's answer, not the base model's

        for args, message in [
            ({"run_id": "no-such-run"}, "unknown run id 'no-such-run'"),
            ({"run_id": RUN_ID, "checkpoint_step": 7}, f"no checkpoint at step 7; saved steps: {TRAIN_STEPS}"),
            ({"checkpoint_step": 3}, "checkpoint_step needs run_id"),
            ({"run_id": RUN_ID, "models": ["x"]}, "leave models, base_url, api_key_env and target out"),
        ]:
            refused = await client.call_tool("rl_test_inference", {"num_steps": 1, "group_size": 2, **args})
            assert refused.is_error and message in refused.content[0].text, refused.content


def test_what_a_test_targets_is_decided_without_mcp() -> None:
    """The tool's choice of target, called as the domain's function: refusals before any run is read."""

    def no_run(run_id: str) -> RunRecord:
        raise AssertionError(f"read run {run_id}")

    choose = functools.partial(chosen_target, run=no_run, environ={}, local_model="tiny-chat", local_default=True)
    with pytest.raises(InferenceTestError, match="leave models, base_url, api_key_env and target out"):
        choose(ModelsAsked(run_id="r", models=["x"]))
    with pytest.raises(InferenceTestError, match="checkpoint_step needs run_id"):
        choose(ModelsAsked(checkpoint_step=3))
    where, run = choose(ModelsAsked())
    assert (where.kind, run) == ("local", None)
    where, _ = choose(ModelsAsked(models=["m"], base_url="http://127.0.0.1:9/v1"))
    assert where.kind == "openai_compatible" and where.base_url == "http://127.0.0.1:9/v1"
