"""The Tinker path for real: on the `skyrl` profile the server starts SkyRL's Tinker-API engine (JAX on
this CPU) and its runs train SmolLM2 through the tinker SDK, driven by a real MCP client.

One server, one engine for the whole story (an engine's start and its XLA compiles take minutes):
A (arithmetic) stopped after its state at step 2 -> B = resume(A) completes; C = fork(A at 2);
rl_test_inference with B's weights; B exported as adapter and merged, the adapter's greedy replies
equal to the engine's own for the same weights; an agentic environment (tool_calculator) 2 steps;
the engine's log as a resource; everything stopped with the server.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil
import pytest
import yaml
from mcp import Client
from test_runs_resume_e2e import call, ended, wait_for

from rl_mcp.app import open_app
from rl_mcp.mcp_api.server import build_server
from rl_mcp.settings import Settings
from tinker_atropos.run_files import RunFiles, read_jsonl

# One story on one engine: its start and XLA compiles alone take minutes on 2 cores (about 20 in all
# here), past the suite's 900 s default.
pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.timeout(2700)]

ARITHMETIC = {
    "total_steps": 4,
    "group_size": 4,
    "batch_size": 8,
    "save_state_every": 2,
    "max_completion_tokens": 16,
    "eval_size": 8,
    "steps_per_eval": 1000,
}
AGENT = {"total_steps": 2, "group_size": 2, "batch_size": 4}
GREEDY_PROMPTS = ["What is 12 + 7?", "What is 3 + 45?", "Say hello.", "What is 30 + 31?"]
GREEDY_TOKENS = 12


def chat_prompts(prompts: list[str]) -> list[list[int]]:
    from transformers import AutoTokenizer

    from tinker_atropos.models.paths import model_dir

    tokenizer = AutoTokenizer.from_pretrained(model_dir("smollm2-135m"))
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
    training = service.create_lora_training_client(base_model="smollm2-135m", rank=16).result()
    try:
        load_state_into_new_model(training, state, optimizer=False)
        sampler = training.save_weights_and_get_sampling_client("greedy-check")
        # as the trainer samples: stop=None made explicit (SkyRL stops only where told)
        params = stop_at_eos(
            types.SamplingParams(max_tokens=GREEDY_TOKENS, temperature=0.0), offline_eos_ids("smollm2-135m")
        )
        futures = [sampler.sample(types.ModelInput.from_ints(ids), 1, params) for ids in chat_prompts(prompts)]
        return [list(f.result().sequences[0].tokens) for f in futures]
    finally:
        unload_model(url, training.model_id, 30.0)


def transformers_greedy(adapter: Path, prompts: list[str]) -> list[list[int]]:
    """Greedy replies of the exported PEFT adapter, loaded the way a user loads it."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from tinker_atropos.models.paths import model_dir

    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(model_dir("smollm2-135m")), adapter)
    replies = []
    for ids in chat_prompts(prompts):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=GREEDY_TOKENS, do_sample=False)
        replies.append(out[0, len(ids) :].tolist())
    return replies


def environ(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "RL_MCP_HOME": str(home), "RL_MCP_PROFILE": "skyrl", "RL_MCP_STATUS_MIN_INTERVAL": "0"}
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


async def test_the_tinker_backend_end_to_end_on_skyrls_engine(tmp_path: Path) -> None:
    home = tmp_path / "home"
    async with open_app(Settings.from_env(environ(home))) as app, Client(build_server(app)) as client:
        await call(client, "rl_select_environment", name="arithmetic")
        for field, value in ARITHMETIC.items():
            await call(client, "rl_edit_config", field=field, value=value)

        # --- A: the engine starts with it (stage engine); stopped once its state at step 2 is saved ---
        a = await call(client, "rl_start_training")
        config = yaml.safe_load(Path(a["config_path"]).read_text())["tinker"]
        assert config["backend"] == "tinker" and config["self_hosted"] is True
        assert config["tinker_base_url"] == app.engine_url and config["lora_rank"] == 16
        await wait_for(client, a["run_id"], lambda s: s["step"] >= 2, timeout=1500)
        with anyio.fail_after(300):
            while 2 not in [
                s["step"] for s in (await call(client, "rl_get_results", run_id=a["run_id"]))["training_states"]
            ]:
                await anyio.sleep(1.0)
        assert (await call(client, "rl_stop_training", run_id=a["run_id"]))["status"] == "stopped"
        first = metrics_of(a)[0]
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

        # --- B = resume(A) to step 4; C = fork(A at step 2) --------------------------------------------
        b = await call(client, "rl_start_training", resume_from=a["run_id"])
        b_done = await wait_for(client, b["run_id"], ended, 1200)
        assert b_done["status"] == "completed", b_done
        assert [int(m["step"]) for m in metrics_of(b)] == [1, 2, 3, 4], metrics_of(b)
        c = await call(
            client, "rl_start_training", resume_from=a["run_id"], checkpoint_step=2, fork=True, total_steps=3
        )
        c_done = await wait_for(client, c["run_id"], ended, 1200)
        assert c_done["status"] == "completed", c_done
        assert [int(m["step"]) for m in metrics_of(c)] == [1, 2, 3]
        b_results = await call(client, "rl_get_results", run_id=b["run_id"])
        assert b_results["final_weights"].startswith("tinker://"), b_results

        # --- rl_test_inference with B's weights (its checkpoint downloaded from the engine) -------------
        tested = await call(client, "rl_test_inference", run_id=b["run_id"], num_steps=1, group_size=2)
        assert tested["environment_working"] and all(r["status"] == "ok" for r in tested["results"]), tested

        # --- export: adapter and merged, each checked by the export against the trained policy ---------
        exported = {}
        for fmt in ("adapter", "merged"):
            exported[fmt] = answer = await call(client, "rl_export_model", run_id=b["run_id"], format=fmt)
            assert answer["check"]["matches"] >= answer["check"]["required"] >= 1, answer
            assert answer["checkpoint_step"] == 4, answer  # B's last step: the weights of its final state
        # the exported adapter in transformers replies as the engine does, greedily, for the same weights
        assert app.engine is not None
        async with app.engine.hold() as url:
            engine_replies = await anyio.to_thread.run_sync(
                engine_greedy, url, b_results["final_state"], GREEDY_PROMPTS
            )
        assert engine_replies == transformers_greedy(Path(exported["adapter"]["folder"]), GREEDY_PROMPTS)

        # --- an agentic environment, 2 steps ------------------------------------------------------------
        await call(client, "rl_select_environment", name="tool_calculator")
        for field, value in AGENT.items():
            await call(client, "rl_edit_config", field=field, value=value)
        d = await call(client, "rl_start_training")
        d_done = await wait_for(client, d["run_id"], ended, 1500)
        assert d_done["status"] == "completed", d_done
        assert [int(m["step"]) for m in metrics_of(d)] == [1, 2]
        assert engine_processes(), "the engine runs while the server does"

        # --- a classic verifiers environment, 2 steps: its own code's model calls sampled by the engine --
        await call(client, "rl_select_environment", name="word_count")
        for field, value in {**AGENT, "num_examples": 6, "max_completion_tokens": 8}.items():
            await call(client, "rl_edit_config", field=field, value=value)
        v = await call(client, "rl_start_training")
        v_done = await wait_for(client, v["run_id"], ended, 900)
        assert v_done["status"] == "completed", v_done
        assert [m["env_metrics"]["num_turns"] for m in metrics_of(v)] == [1.0, 1.0]  # the rubric's, logged
        batch = json.loads(RunFiles(Path(v["run_dir"])).first_batch.read_text())["groups"][0]
        from transformers import AutoTokenizer

        from tinker_atropos.models.paths import model_dir

        tokenizer = AutoTokenizer.from_pretrained(model_dir("smollm2-135m"))
        for tokens, masks, episode in zip(batch["tokens"], batch["masks"], batch["messages"]):
            trained = [t for t, m in zip(tokens, masks) if m != -100]  # the engine's sampled ids, as sampled
            assert tokenizer.decode(trained, skip_special_tokens=True) == episode[-1]["content"], episode

        # --- the engine killed as the OOM killer does: the run fails saying so, with the fix ---------
        await call(client, "rl_select_environment", name="arithmetic")
        e = await call(client, "rl_start_training")
        await wait_for(client, e["run_id"], lambda s: s["status"] == "running", 600)
        for proc in engine_processes():
            if "skyrl.tinker.engine" in " ".join(proc.cmdline()):
                proc.kill()
        failed = await wait_for(client, e["run_id"], ended, 120)
        assert failed["status"] == "failed", failed
        for needed in ("ran out of memory", '"train_micro_batch_size": 1', "exit code -9", "engine log"):
            assert needed in failed["error"], (needed, failed["error"])
    with anyio.fail_after(30):
        while engine_processes():
            await anyio.sleep(0.5)


async def test_the_engine_stops_once_unused_and_starts_again_for_the_next_user(tmp_path: Path) -> None:
    settings = Settings.from_env(environ(tmp_path / "home", RL_MCP_ENGINE_IDLE_STOP="2"))
    async with open_app(settings) as app:
        engine = app.engine
        assert engine is not None and engine.idle_stop_s == 2.0 and not engine.running
        for start in (1, 2):  # the second hold finds it stopped for idleness and starts it again
            async with engine.hold() as url:
                await anyio.sleep(3.0)  # past idle_stop_s: a holder keeps it up
                assert engine.running and engine_processes(), start
                assert httpx.get(f"{url}/api/v1/healthz", timeout=5.0).status_code == 200
            with anyio.fail_after(60):  # idle 2 s, then its API server and engine process stop
                while engine.running or engine_processes():
                    await anyio.sleep(0.5)
            state = engine.state()
            assert state["running"] is False and state["problem"] is None, state  # stopped, not died
        log = engine.log_path.read_text()
        assert log.count("Starting background engine") == 2, log[-2000:]
