"""The Tinker path for real: on the `skyrl` profile the server starts SkyRL's Tinker-API engine (JAX on
this CPU) and its runs train tiny-chat through the tinker SDK, driven by a real MCP client.

One server, one engine for the story's tests, in order (an engine's start and its XLA compiles take
a minute): A (letter_repeat) stopped once a state is saved -> B = resume(A) completes (2 more
steps); C = fork(A at its oldest state), distilled and trained with a plugin's loss (two passes, as
dro's and cross_entropy's on the engine, whose gradients equal the engine's own); rl_test_inference
with B's weights; B exported as adapter and merged, the adapter's greedy replies equal to the
engine's own for the same weights; an agentic environment (tool_calculator) a supervised stage then
an RL step, a verifiers one 2 steps; the engine's log as a resource; the engine stopped once unused
and started again for the next user; a killed engine named; everything stopped with the server.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil
import pytest
import yaml
from mcp import Client
from test_env_stalls import select
from test_loss_plugins import install_toy_loss
from test_runs_resume_e2e import call, ended, wait_for
from tiny_profiles import on_tiny_chat

from rl_mcp.app import AppContext, open_app
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import Settings
from tinker_atropos.models.paths import TINY_CHAT
from tinker_atropos.run_files import RunFiles, read_jsonl

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# The shipped `skyrl` profile on tiny-chat (tests/tiny_profiles.py): the engine samples and trains it
# in a fraction of SmolLM2's time, through the same calls. Nothing here asserts what a model learns.
MODEL = TINY_CHAT
LETTERS = {
    "total_steps": 100,  # A is stopped once a state is saved, long before its last step
    "group_size": 4,
    "batch_size": 8,
    "save_state_every": 1,
    "max_completion_tokens": 16,
    "eval_size": 2,
    "steps_per_eval": 1000,
}
# two eval items: the evaluations run on the engine as they do for a user, without their XLA compiles
# and greedy replies (16 multi-turn problems took 48 s at step 0) holding the story's worker
AGENT = {"total_steps": 2, "group_size": 2, "batch_size": 4, "eval_size": 2}
GREEDY_PROMPTS = ["What is 12 + 7?", "What is 3 + 45?", "Say hello.", "What is 30 + 31?"]
GREEDY_TOKENS = 12
TIE_NATS = 0.01  # a near-tie of the top two tokens: far above float32's last bits, far below a wrong weight
IDLE_STOP_S = 3600.0  # the story's server's: past the story (a test sets 2 s to see the engine stop)


def chat_prompts(prompts: list[str]) -> list[list[int]]:
    from transformers import AutoTokenizer

    from tinker_atropos.models.paths import model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir(MODEL))
    chats = ([{"role": "user", "content": p}] for p in prompts)
    return [
        list(tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=True)["input_ids"]) for c in chats
    ]


def engine_greedy(url: str, state: str, prompts: list[str]) -> list[list[int]]:
    """The engine's own greedy replies for the weights of `state`, sampled through the tinker SDK."""
    import tinker
    from tinker import types

    from tinker_atropos.backends.tinker_compat import (
        allow_missing_sequence_ids,
        load_state_into_new_model,
        offline_eos_ids,
        stop_at_eos,
        unload_model,
    )

    allow_missing_sequence_ids()
    service = tinker.ServiceClient(base_url=url, api_key="tml-self-hosted")
    # created as the run's trainer creates its model (its seed), then given the state: what a state does
    # not hold (SkyRL's trimmed checkpoints) is then the run's own, not another random draw
    training = service.create_lora_training_client(base_model=MODEL, rank=16, seed=0).result()
    try:
        load_state_into_new_model(training, state, optimizer=False)
        sampler = training.save_weights_and_get_sampling_client("greedy-check")
        # as the trainer samples: stop=None made explicit (SkyRL stops only where told)
        params = stop_at_eos(types.SamplingParams(max_tokens=GREEDY_TOKENS, temperature=0.0), offline_eos_ids(MODEL))
        futures = [sampler.sample(types.ModelInput.from_ints(ids), 1, params) for ids in chat_prompts(prompts)]
        return [list(f.result().sequences[0].tokens) for f in futures]
    finally:
        unload_model(url, training.model_id, 30.0)


def late_request_keeps_the_trained_weights(url: str) -> tuple[float, float]:
    """Two sampler checkpoints of one model, the second after an update, each through a SlotOrder as
    the trainer makes them; then a late request through the first one's sampler, and the state saved
    after it: (how far that state's logprobs are from the second checkpoint's, from the first's)."""
    import numpy as np
    import tinker
    from tinker import types

    from tinker_atropos.backends.slot_order import SlotOrder
    from tinker_atropos.backends.tinker_backend import TinkerSampler
    from tinker_atropos.backends.tinker_compat import (
        allow_missing_sequence_ids,
        load_state_into_new_model,
        unload_model,
    )

    allow_missing_sequence_ids()
    service = tinker.ServiceClient(base_url=url, api_key="tml-self-hosted")
    models = [service.create_lora_training_client(base_model=MODEL, rank=16, seed=0).result() for _ in range(2)]
    training, fresh = models
    ids = chat_prompts(["What is 12 + 7?"])[0]
    probe = types.ModelInput.from_ints(ids)
    datum = types.Datum(
        model_input=probe,
        loss_fn_inputs={"target_tokens": np.array(ids[1:] + ids[:1]), "weights": np.ones(len(ids), dtype=np.float32)},
    )
    order = SlotOrder()

    async def checkpoint(name: str) -> TinkerSampler:
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=5e-2)).result()
        client = training.create_sampling_client(training.save_weights_for_sampler(name).result().path)
        order.register(client)
        await order.load()
        return TinkerSampler(client, order=order)

    async def logprobs(sampler: TinkerSampler) -> np.ndarray:
        return np.array((await sampler.compute_logprobs_async(probe))[1:], dtype=np.float64)

    async def story() -> tuple[float, float]:
        first = await checkpoint("late-1")
        w1 = await logprobs(first)
        w2 = await logprobs(await checkpoint("late-2"))
        await logprobs(first)  # late: the environment's request made through the older sampler
        load_state_into_new_model(fresh, training.save_state("after-late").result().path, optimizer=False)
        ws = await logprobs(TinkerSampler(fresh.save_weights_and_get_sampling_client("late-check")))
        return float(np.abs(ws - w2).max()), float(np.abs(ws - w1).max())

    try:
        return asyncio.run(story())
    finally:
        for model in models:
            unload_model(url, model.model_id, 30.0)


# each loss SkyRL 0.4 has, with a loss_fn_config: {local loss_fn_config} for the same math here
ENGINE_LOSSES = [
    ("importance_sampling", None, None),
    ("ppo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.28}, None),
    ("cispo", {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}, None),
    ("cispo", None, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),  # SkyRL's default, not Tinker's
]
LOG_RATIOS = [0.5, -0.5, 0.1, 0.2, 1.6, -0.3]  # ratios below 0.8, inside, past 1.28 and past 4


def engine_policy_losses(url: str) -> tuple[list[Any], list[list[tuple[Any, Any]]], dict[str, tuple[float, float]]]:
    """A batch of two replies (advantages +1.5 and -0.7, the sampler's logprobs set off the engine's
    own by LOG_RATIOS, 0 on the prompt as the trainer sends them, no weights) through the engine's
    forward_backward once per ENGINE_LOSSES entry: (the datums, each call's (logprobs, elementwise
    loss) per datum, and `both_ways`' gradient norms)."""
    import numpy as np
    import tinker
    from tinker import types

    from tinker_atropos.backends.tinker_compat import allow_missing_sequence_ids, unload_model

    allow_missing_sequence_ids()
    service = tinker.ServiceClient(base_url=url, api_key="tml-self-hosted")
    training = service.create_lora_training_client(base_model=MODEL, rank=16, seed=0).result()
    try:
        prompts = chat_prompts(["What is 12 + 7?", "Say hello."])
        rows = [p + list(b"The answer: 19.") for p in prompts]  # tiny-chat's tokens are bytes
        probe = [
            types.Datum(
                model_input=types.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={"target_tokens": np.array(ids[1:]), "weights": np.zeros(len(ids) - 1, np.float32)},
            )
            for ids in rows
        ]
        first = training.forward(probe, "cross_entropy").result().loss_fn_outputs
        data = []
        for ids, prompt, out, adv in zip(rows, prompts, first, (1.5, -0.7), strict=True):
            lp = out["logprobs"].to_numpy().astype(np.float64)
            reply = np.arange(len(ids) - 1) >= len(prompt) - 1
            shift = np.resize(LOG_RATIOS, len(ids) - 1)
            data.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(ids[:-1]),
                    loss_fn_inputs={
                        "target_tokens": np.array(ids[1:]),
                        "logprobs": np.where(reply, lp - shift, 0.0).astype(np.float32),
                        "advantages": np.where(reply, adv, 0.0).astype(np.float32),
                    },
                )
            )
        calls = []
        for loss_fn, config, _ in ENGINE_LOSSES:
            result = training.forward_backward(data, loss_fn, loss_fn_config=config).result()
            calls.append([(o["logprobs"].to_numpy(), o["elementwise_loss"].to_numpy()) for o in result.loss_fn_outputs])
        engine_lp = [lp for lp, _ in calls[0]]
        return data, calls, asyncio.run(both_ways(training, data, engine_lp))
    finally:
        unload_model(url, training.model_id, 30.0)


DRO_BETA = 0.5


async def both_ways(training: Any, data: list[Any], engine_lp: list[Any]) -> dict[str, tuple[float, float]]:
    """Per loss, the gradient norm of two passes (losses/on_tinker.py) and of the engine's own
    importance_sampling with the same gradient: the loss's own where the engine has it; for
    cross_entropy (advantages as weights) and dro, importance_sampling at ratio 1 (the sampler's
    logprobs = the engine's) with the advantages -dloss/dlogp worked by hand. An optimizer step at
    learning rate 0 reports each norm and leaves the weights as they are."""
    import numpy as np
    from tinker import types

    from tinker_atropos.backends.tinker_compat import grad_norm_of
    from tinker_atropos.losses import LOSSES
    from tinker_atropos.losses.on_tinker import engine_factors, forward_backward, two_passes

    frozen = types.AdamParams(learning_rate=0.0)

    async def norm_of(pending: Any) -> float:
        await pending
        norm = grad_norm_of((await training.optim_step(frozen)).metrics)
        assert norm is not None
        return norm

    def at_ratio_one(datum: Any, lp: Any, advantages: Any) -> Any:
        inputs = {**datum.loss_fn_inputs, "logprobs": np.asarray(lp, np.float32)}
        inputs["advantages"] = np.asarray(advantages, np.float32)
        return types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)

    hand = {"importance_sampling": [], "ppo": [], "cispo": [], "cross_entropy": [], "dro": []}
    for datum, lp in zip(data, engine_lp, strict=True):
        q, adv = datum.loss_fn_inputs["logprobs"].to_numpy(), datum.loss_fn_inputs["advantages"].to_numpy()
        hand["cross_entropy"].append(at_ratio_one(datum, lp, adv))
        hand["dro"].append(at_ratio_one(datum, lp, adv - np.where(q != 0, DRO_BETA * (lp - q), 0.0)))
    await training.optim_step(frozen)  # the gradients engine_policy_losses' calls left: not a loss's here
    norms = {}
    for name, loss in LOSSES.items():
        sent = loss.datums(data)
        config = loss.config({"beta": DRO_BETA} if name == "dro" else None)
        passes = await norm_of(two_passes(training, sent, loss, config, engine_factors(sent)))
        if hand[name]:
            own = await norm_of(forward_backward(training, hand[name], "importance_sampling", None, True))
        else:
            own = await norm_of(forward_backward(training, sent, name, config, True))
        norms[name] = (passes, own)
    return norms


def transformers_shortfall(adapter: Path, prompts: list[str], replies: list[list[int]]) -> list[list[float]]:
    """For each of the engine's greedy reply tokens: how far below the exported adapter's own greedy
    choice it is there, in nats (0: the same token), with the reply so far as the context. Two
    frameworks' float32 sums differ in their last bits, so where the top two logits all but tie the
    greedy choices may differ; a wrong export puts the engine's tokens far below."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tinker_atropos.models.paths import model_dir

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir(MODEL)), adapter)
    out = []
    for ids, reply in zip(chat_prompts(prompts), replies, strict=True):
        with torch.no_grad():
            logprobs = torch.log_softmax(model(torch.tensor([ids + reply])).logits[0].float(), dim=-1)
        rows = logprobs[len(ids) - 1 : len(ids) - 1 + len(reply)]
        out.append([float(row.max() - row[token]) for row, token in zip(rows, reply, strict=True)])
    return out


def environ(home: Path, **extra: str) -> dict[str, str]:
    profile = str(on_tiny_chat("skyrl", home.parent))
    env = {**os.environ, "RL_MCP_HOME": str(home), "RL_MCP_PROFILE": profile, "RL_MCP_STATUS_MIN_INTERVAL": "0"}
    # the engine's XLA compiles without LLVM's optimizations: tiny-chat's arithmetic is trivial, its
    # compiles are not (the first run's engine took 34 CPU s against 47; the weights' checks unchanged)
    env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()
    env["RL_MCP_ENV_DIRS"] = str(Path(__file__).parent / "byo_envs" / "verifiers")  # word_count
    env.pop("TINKER_API_KEY", None)
    return {**env, **extra}


def metrics_of(run: dict[str, Any]) -> list[dict[str, Any]]:
    return read_jsonl(RunFiles(Path(run["run_dir"])).metrics)


def engine_processes() -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if "skyrl.tinker.api" in cmdline or "skyrl.tinker.engine" in cmdline:
            found.append(proc)
    return found


@dataclass
class Story:
    """The one server (and its engine) the story's tests share, and the runs they pass on."""

    app: AppContext
    client: Client
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)

    def run(self, name: str) -> dict[str, Any]:
        if name not in self.runs:
            pytest.fail(f"run {name} of the story is missing: an earlier test of this file failed")
        return self.runs[name]


@pytest.fixture(scope="module")
async def story(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Story]:
    """One server, one engine for the file's tests, in order; the engine gone once the server is."""
    home = tmp_path_factory.mktemp("skyrl-story") / "home"
    plugins = install_toy_loss(home.parent)  # a loss from another package: fork C trains with it
    # the children import the plugin, and the code under test where the suite's PYTHONPATH names it (a worktree's)
    path = os.pathsep.join(p for p in (str(plugins), os.environ.get("PYTHONPATH", "")) if p)
    settings = Settings.from_env(environ(home, RL_MCP_ENGINE_IDLE_STOP=str(IDLE_STOP_S), PYTHONPATH=path))
    async with open_app(settings) as app, Client(build_server(app)) as client:
        assert app.engine is not None and app.engine.idle_stop_s == IDLE_STOP_S and not app.engine.running
        yield Story(app, client)
    with anyio.fail_after(30):
        while engine_processes():
            await anyio.sleep(0.5)


# --- A: the engine starts with it (stage engine); stopped once a training state is saved ----------
async def test_a_run_starts_the_engine_and_trains_through_the_tinker_sdk(story: Story) -> None:
    client = story.client
    # a warmup of 2 steps: 1/3 and 2/3 of the rate, sent to the engine in each step's AdamParams
    await select(client, "letter_repeat", **LETTERS, lr_schedule="linear", lr_warmup_steps=2)
    a = story.runs["A"] = await call(client, "rl_start_training")
    config = yaml.safe_load(Path(a["config_path"]).read_text())["trainer"]
    assert config["backend"] == "tinker" and config["self_hosted"] is True
    assert config["tinker_base_url"] == story.app.engine_url and config["lora_rank"] == 16
    await wait_for(client, a["run_id"], lambda s: s["step"] >= 1, timeout=1500)
    # a state saved: not necessarily step 1's, which may have left the index already (steps take ~1 s
    # here, and only the newest `keep_states` are kept)
    with anyio.fail_after(300):
        while not (await call(client, "rl_get_results", run_id=a["run_id"]))["training_states"]:
            await anyio.sleep(1.0)
    assert (await call(client, "rl_stop_training", run_id=a["run_id"]))["status"] == "stopped"
    first = metrics_of(a)[0]
    assert first["learning_rate"] == pytest.approx(config["learning_rate"] / 3)
    # the engine returns no forward_backward metrics: the loss is its elementwise losses' sum
    assert first["loss"] is not None and first["grad_norm"] is not None and first["grad_norm"] > 0, first
    # every input of the diagnosis rules arrives on this path: the grad norm under SkyRL's key, the
    # drift from the engine's sampling logprobs against its training logprobs, the replies' spread
    for key in ("logprob_drift", "distinct_reply_share", "token_entropy", "no_signal_share", "reward_std"):
        assert isinstance(first[key], float | int), (key, first)
    status_a = await call(client, "rl_check_status", run_id=a["run_id"])
    latest = status_a["latest"]
    assert None not in (latest["loss"], latest["no_signal_share"], latest["distinct_reply_share"]), latest
    assert all(f["code"] and f["next_step"]["tool"] for f in status_a["findings"]), status_a["findings"]
    log = (await client.read_resource("rl://engine/log")).contents[0].text  # type: ignore[union-attr]
    # its last 200 lines: the engine's requests (health probes, the run's calls); its start-up line
    # may have scrolled out already, the more so on a busy machine (a slower run probes more)
    assert 0 < len(log.splitlines()) <= 200 and "/api/v1/" in log, log[-2000:]


# --- A's weights served (rl_serve_model): downloaded from the engine, answering Hermes' streamed request --
async def test_a_stopped_runs_weights_serve_hermes_streamed_requests_from_the_engines_checkpoint(story: Story) -> None:
    """A self-hosted engine's checkpoint is downloaded from it (held up meanwhile) and sampled by the product's
    server, which keeps serving once the engine stops; its memory reckoned as the local sampler's."""
    from serve_paths import hermes_stream

    from rl_mcp.serving.memory import ENGINE_COPIES, SERVER_BYTES

    client, a = story.client, story.run("A")
    final = (await call(client, "rl_get_results", run_id=a["run_id"]))["final_weights"]
    served = await call(client, "rl_serve_model", run_id=a["run_id"], weights="final")
    try:
        assert served["weights"] == final and final.startswith("tinker://"), served
        assert (served["backend"], served["sampler"], served["base_model"]) == ("local", "engine", MODEL), served
        memory = served["memory"]
        assert memory["estimate_bytes"] > SERVER_BYTES and f"{ENGINE_COPIES} x" in memory["estimate_basis"], memory
        assert 100 * 2**20 < memory["rss_bytes"] < 2 * memory["estimate_bytes"], memory
        log = Path(served["log"])
        assert f"downloading {final} from the self-hosted engine at {story.app.engine_url}" in log.read_text()
        messages = [{"role": "user", "content": GREEDY_PROMPTS[0]}]
        # Hermes' request but for its max_tokens: tiny-chat would run to the reply cap (1024 tokens, ~7 s here);
        # the clamp of Hermes' 65536 is test_vllm_sampler's
        reply = await hermes_stream(served["url"], served["model"], messages, [], temperature=0.0, max_tokens=12)
        assert reply.finish_reason in ("stop", "length") and reply.usage and reply.usage["completion_tokens"] > 0
        assert f"served by {final}" in log.read_text(), log.read_text()[-2000:]  # its checkpoint, downloaded
    finally:
        stopped = await call(client, "rl_stop_served_model", model=served["model"])
    assert stopped["was_running"] and stopped["exit_code"] == 0, stopped


# --- B = resume(A) to step 3; C = fork(A at step 1) taught by the base model; A as a teacher -----------
async def test_a_stopped_run_resumes_and_forks_from_its_state_on_the_engine(story: Story, tmp_path: Path) -> None:
    client, a = story.client, story.run("A")
    states = [s["step"] for s in (await call(client, "rl_get_results", run_id=a["run_id"]))["training_states"]]
    a_first, a_last = states[0], states[-1]  # the oldest kept and the latest
    b = story.runs["B"] = await call(client, "rl_start_training", resume_from=a["run_id"], total_steps=a_last + 2)
    assert b["resumed_from"] == {"parent_run_id": a["run_id"], "step": a_last, "kind": "resume"}, b
    b_done = await wait_for(client, b["run_id"], ended, 1200)
    assert b_done["status"] == "completed", b_done
    assert [int(m["step"]) for m in metrics_of(b)] == list(range(1, a_last + 3)), metrics_of(b)
    # C distills the base model: the engine's sampling client scores its replies (compute_logprobs); its
    # loss is a plugin's (tests/plugins/toy_loss), which the engine has no built-in of: two passes
    await call(client, "rl_edit_config", field="teacher", value=MODEL)
    await call(client, "rl_edit_config", field="loss_fn", value="sign_pg")
    c = await call(
        client,
        "rl_start_training",
        resume_from=a["run_id"],
        checkpoint_step=a_first,
        fork=True,
        total_steps=a_first + 1,
    )
    assert c["resumed_from"] == {"parent_run_id": a["run_id"], "step": a_first, "kind": "fork"}, c
    c_done = await wait_for(client, c["run_id"], ended, 1200)
    assert c_done["status"] == "completed", c_done
    assert [int(m["step"]) for m in metrics_of(c)] == list(range(1, a_first + 2))
    trained = metrics_of(c)[a_first:]  # the fork's own step: A's up to the state are seeded
    assert all(isinstance(m["teacher_kl"], float) and m["teacher_logprob"] < 0 for m in trained), trained
    assert all(math.isfinite(m["loss"]) and m["grad_norm"] > 0 for m in trained), trained
    assert yaml.safe_load(Path(c["config_path"]).read_text())["trainer"]["loss_fn"] == "sign_pg"

    # A's last weights as a teacher: the engine unloaded A's model at A's end, so the trainer downloads the
    # checkpoint from the engine's archive and scores with it in its own process
    from tinker import types
    from transformers import AutoTokenizer

    from rl_mcp.distill.teacher import Student, resolve_teacher
    from tinker_atropos.backends.sampler_source import BackendSamplers
    from tinker_atropos.distill.teacher import teacher_sampler
    from tinker_atropos.models.paths import model_dir
    from tinker_atropos.trainer.config import RunConfig

    teacher = resolve_teacher(a["run_id"], None, Student("tinker", MODEL, self_hosted=True), story.app.runs.list())
    assert teacher.ref.startswith("tinker://") and teacher.run_id == a["run_id"], teacher
    config = yaml.safe_load(Path(c["config_path"]).read_text())
    config["trainer"].update(teacher=teacher.ref, run_dir=str(tmp_path), loss_fn="ppo")  # the plugin's is C's alone
    cfg = RunConfig.model_validate(config)
    tokenizer = AutoTokenizer.from_pretrained(model_dir(MODEL))
    sampler = await teacher_sampler(cfg, BackendSamplers(cfg, None), tokenizer, 1024)  # type: ignore[arg-type]
    ids = tokenizer.encode("Repeat the letter a three times: aaa")
    scored = await sampler.compute_logprobs_async(types.ModelInput.from_ints(ids))
    assert scored[0] is None and all(v is not None and v < 0 for v in scored[1:]), scored
    assert (tmp_path / "teacher_weights" / "adapter_model.safetensors").is_file()


# --- rl_test_inference with B's weights (its checkpoint downloaded from the engine); export -----------
async def test_the_trained_weights_answer_inference_and_export_as_the_engine_samples(story: Story) -> None:
    client, b = story.client, story.run("B")
    b_results = await call(client, "rl_get_results", run_id=b["run_id"])
    assert b_results["final_weights"].startswith("tinker://"), b_results
    tested = await call(client, "rl_test_inference", run_id=b["run_id"], num_steps=1, group_size=2)
    assert tested["environment_working"] and all(r["status"] == "ok" for r in tested["results"]), tested

    # export: adapter and merged, each checked by the export against the trained policy
    exported = {}
    for fmt in ("adapter", "merged"):
        exported[fmt] = answer = await call(client, "rl_export_model", run_id=b["run_id"], format=fmt)
        assert answer["check"]["matches"] >= answer["check"]["required"] >= 1, answer
        # B's last step: the weights of its final state
        assert answer["checkpoint_step"] == metrics_of(b)[-1]["step"], answer
    # the exported adapter in transformers replies as the engine does, greedily, for the same weights (ties aside)
    engine = story.app.engine
    assert engine is not None
    async with engine.hold() as url:
        engine_replies = await anyio.to_thread.run_sync(engine_greedy, url, b_results["final_state"], GREEDY_PROMPTS)
        # a late request through an older checkpoint's sampler leaves the model's trained weights in place
        # (SkyRL loads a sampled checkpoint into the slot its model trains: tinker_atropos/backends/slot_order.py)
        to_newest, to_older = await anyio.to_thread.run_sync(late_request_keeps_the_trained_weights, url)
    assert to_newest < 1e-4 < 0.1 < to_older, (to_newest, to_older)
    shortfall = transformers_shortfall(Path(exported["adapter"]["folder"]), GREEDY_PROMPTS, engine_replies)
    assert max(max(r) for r in shortfall) < TIE_NATS, shortfall  # each token the adapter's greedy one, or a tie
    assert sum(v == 0.0 for r in shortfall for v in r) >= 0.9 * sum(map(len, shortfall)), shortfall


# --- the policy losses and their loss_fn_config on the engine: the local backend's math -------------
async def test_the_engines_policy_losses_are_the_local_backends_math(story: Story) -> None:
    """importance_sampling, ppo and cispo with loss_fn_config (SkyRL honours the clip bounds) give,
    token for token, the local backend's elementwise_loss of the engine's own logprobs; without a
    config SkyRL's cispo clips to 0.8-1.2, not Tinker's 0-4, so the trainer sends the bounds. Every
    loss run as two passes has the gradient of the engine's own."""
    import torch

    from tinker_atropos.losses import loss_named

    engine = story.app.engine
    assert engine is not None
    async with engine.hold() as url:
        data, calls, norms = await anyio.to_thread.run_sync(engine_policy_losses, url)
    for (loss_fn, config, local), outputs in zip(ENGINE_LOSSES, calls, strict=True):
        for datum, (lp, losses) in zip(data, outputs, strict=True):
            inputs = {k: datum.loss_fn_inputs[k].to_torch() for k in ("logprobs", "advantages")}
            mine = loss_named(loss_fn).elementwise(torch.tensor(lp), inputs, local or config)
            # two frameworks' float32 exp and products: a few ulps apart
            torch.testing.assert_close(torch.tensor(losses), mine, rtol=1e-5, atol=1e-6, msg=loss_fn)
    lp, q = calls[1][0][0], data[0].loss_fn_inputs["logprobs"].to_numpy()
    ratios = [math.exp(a - b) for a, b in zip(lp, q) if b != 0]
    assert min(ratios) < 0.8 and any(1.28 < r < 4 for r in ratios) and max(ratios) > 4, ratios  # bounds bind
    # every loss as two passes: the gradient of the engine's own loss, or of the same by hand
    assert set(norms) == {"importance_sampling", "ppo", "cispo", "dro", "cross_entropy"}, norms
    for name, (passes, own) in norms.items():
        assert passes > 0 and passes == pytest.approx(own, rel=1e-3), (name, norms)


# --- an agentic environment: a supervised stage, then an RL step, on the same adapter ----------------
async def test_an_agentic_environment_trains_its_supervised_stage_then_rl_on_the_engine(story: Story) -> None:
    client = story.client
    # tiny-chat: the tool prompt takes ~860 of its tokens (a byte each); turns of at most 64 tokens in a
    # 1024-token context keep every sample and step in one of the engine's buckets (one compile each)
    edits = {"max_token_length": 1024, "max_turn_tokens": 64, "ensure_scores_are_not_same": False}
    stage = {"sources": ["demonstrations"], "items": 2, "batch_size": 2, "max_steps": 1, "learning_rate": 1e-3}
    short = "Use the calculator."  # the whole demonstration (call, result, answer) within the 1024 tokens
    # one RL step: its first request loads the stage's state (XLA's engine runs a 1024-token step slowly)
    await select(
        client,
        "tool_calculator",
        **{**AGENT, "total_steps": 1},
        **edits,
        demonstrations_per_group=0,
        sft=stage,
        system_prompt=short,
    )
    d = await call(client, "rl_start_training")
    d_done = await wait_for(client, d["run_id"], ended, 1500)
    assert d_done["status"] == "completed", (d_done["error"], d_done["failure_log_tail"])
    assert (d_done["sft"]["step"], d_done["sft"]["ended"]) == (1, "budget") and d_done["sft"]["loss"] > 0
    files = RunFiles(Path(d["run_dir"]))
    state = json.loads(files.sft_result.read_text())["state"]
    assert state.startswith("tinker://"), state  # the engine's, and RL's first request loads it
    assert f"starting from the supervised stage's state {state}" in files.log("trainer").read_text()
    assert [int(m["step"]) for m in metrics_of(d)] == [1]
    assert engine_processes(), "the engine runs while the server does"


# --- a classic verifiers environment, 2 steps: its own code's model calls sampled by the engine ------
async def test_a_verifiers_environment_samples_its_own_calls_on_the_engine(story: Story) -> None:
    client = story.client
    await select(client, "word_count", **AGENT, num_examples=6, max_completion_tokens=8)
    v = await call(client, "rl_start_training")
    v_done = await wait_for(client, v["run_id"], ended, 900)
    assert v_done["status"] == "completed", v_done
    # the rubric's, logged: one turn an episode, less where verifiers ended one on an empty reply
    turns = [m["env_metrics"]["num_turns"] for m in metrics_of(v)]
    assert len(turns) == 2 and all(0 < t <= 1.0 for t in turns), turns
    groups = json.loads(RunFiles(Path(v["run_dir"])).first_batch.read_text())["groups"]
    from transformers import AutoTokenizer

    from tinker_atropos.models.paths import model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir(MODEL))
    episodes = [e for g in groups for e in zip(g["tokens"], g["masks"], g["messages"])]
    assert any(m["role"] == "assistant" for _, _, messages in episodes for m in messages), episodes
    for tokens, masks, messages in episodes:
        trained = [t for t, m in zip(tokens, masks) if m != -100]  # the engine's sampled ids, as sampled
        replies = [m["content"] for m in messages if m["role"] == "assistant"]  # none: ended on an empty one
        assert tokenizer.decode(trained, skip_special_tokens=True) == (replies[-1] if replies else ""), messages


# --- unused, the engine stops (not reported dead); the next user starts it again ---------------------
async def test_the_engine_stops_once_unused_and_starts_again_for_the_next_user(story: Story) -> None:
    engine = story.app.engine
    assert engine is not None
    engine.idle_stop_s = 2.0
    try:
        with anyio.fail_after(60):  # no run, no hold: idle 2 s, then its API server and engine process stop
            while engine.running or engine_processes():
                await anyio.sleep(0.5)
        state = engine.state()
        assert state["running"] is False and state["problem"] is None, state  # stopped, not died
        async with engine.hold() as url:  # finds it stopped for idleness and starts it again
            await anyio.sleep(3.0)  # past idle_stop_s: a holder keeps it up
            assert engine.running and engine_processes()
            assert httpx.get(f"{url}/api/v1/healthz", timeout=5.0).status_code == 200
    finally:
        engine.idle_stop_s = IDLE_STOP_S  # up again for the story's last run
    log = engine.log_path.read_text()
    assert log.count("Starting background engine") == 2, log[-2000:]
    # the first start's compiles were kept, the model's small set-up ones too (under 1 s each: JAX's
    # default keeps none of them), for this start and the next server's
    assert len(list((engine.spec.state_dir / "xla-cache").iterdir())) > 100


# --- the engine killed as the OOM killer does: the run fails saying so, with the fix -----------------
async def test_an_engine_killed_under_its_run_fails_it_naming_the_cause_and_the_fix(story: Story) -> None:
    client = story.client
    await select(client, "letter_repeat", total_steps=100)  # still running when its engine is killed
    e = await call(client, "rl_start_training")
    await wait_for(client, e["run_id"], lambda s: s["status"] == "running", 600)
    for proc in engine_processes():
        if "skyrl.tinker.engine" in " ".join(proc.cmdline()):
            proc.kill()
    failed = await wait_for(client, e["run_id"], ended, 120)
    assert failed["status"] == "failed", failed
    for needed in ("ran out of memory", '"train_micro_batch_size": 1', "exit code -9", "engine log"):
        assert needed in failed["error"], (needed, failed["error"])
    # the trainer, stopped, saw the engine refuse and did not wait out its bounded final save
    trainer_log = RunFiles(Path(e["run_dir"])).log("trainer").read_text()
    assert "final save skipped" in trainer_log and "refuses connections" in trainer_log, trainer_log[-2000:]
