"""A self-hosted Tinker engine's (SkyRL's) sampler checkpoint, brought here as a PEFT adapter.

The archive is built exactly as SkyRL 0.4.0 writes one (gzip level 0 holding a tar added with
arcname "": the root entry, `adapter_model.safetensors`, `adapter_config.json` with no
target_modules) from a real PEFT LoRA on tiny-chat, plus the embedding and output-head LoRA the
engine trains with `train_unembed`. A loopback HTTP server stands in for the engine's two static
routes only (the archive's 302 and the download); the engine itself is tested elsewhere. Then:
PEFT loads the folder with every module and computes what the adapter's weights say; the export
child and the standalone inference server take it from there; each failure is clear.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
import warm_children
import yaml
from loopback_http import loopback_http
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict
from safetensors.torch import load_file, save_file
from test_inference_server import wait_healthy
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from rl_mcp.export.plan import plan_export
from rl_mcp.inference.run_weights import pick_checkpoint, run_target
from rl_mcp.inference.target import InferenceRequest, process_config
from rl_mcp.runs.store import RunRecord
from tinker_atropos.backends.local import load_base_model
from tinker_atropos.export.engine_weights import (
    EngineWeightsError,
    download_engine_weights,
    normalize,
    parse_checkpoint_path,
    untie_output_head,
)
from tinker_atropos.models import ensure_model
from tinker_atropos.models.paths import model_ref
from tinker_atropos.run_files import CheckpointKind, RunFiles, record_checkpoint

ROOT = Path(__file__).resolve().parents[1]
MODEL = "tiny-chat"
RANK, ALPHA = 8, 32
LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MODEL_ID, CHECKPOINT = "model_abc123", "step-000002"
ARCHIVE_ROUTE = re.compile(r"^/api/v1/training_runs/([^/]+)/checkpoints/([^/]+)/(archive|download)$")


# --- the archive, as the engine writes it ------------------------------------------------------


def skyrl_tensors(model: Any, seed: int = 0) -> dict[str, torch.Tensor]:
    """A LoRA on `model`'s seven Llama projections (made by PEFT, filled with seeded values) under
    the engine's keys, plus its embedding ([vocab, r] / [r, hidden]) and output-head LoRA."""
    gen = torch.Generator().manual_seed(seed)
    lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules=list(LINEAR)))
    with torch.no_grad():
        for name, param in lora.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    tensors = {k: v.detach().clone() for k, v in get_peft_model_state_dict(lora).items()}
    vocab, hidden = model.get_input_embeddings().weight.shape
    tensors["base_model.model.model.embed_tokens.lora_A.weight"] = torch.randn(vocab, RANK, generator=gen) * 0.05
    tensors["base_model.model.model.embed_tokens.lora_B.weight"] = torch.randn(RANK, hidden, generator=gen) * 0.05
    if model.get_output_embeddings().weight is not model.get_input_embeddings().weight:
        tensors["base_model.model.lm_head.lora_A.weight"] = torch.randn(RANK, hidden, generator=gen) * 0.05
        tensors["base_model.model.lm_head.lora_B.weight"] = torch.randn(vocab, RANK, generator=gen) * 0.05
    return tensors


def skyrl_folder(folder: Path, tensors: dict[str, torch.Tensor]) -> Path:
    """The two files as the engine saves them: its config from peft.LoraConfig with no target_modules."""
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    LoraConfig(base_model_name_or_path="/engine/models/tiny", r=RANK, lora_alpha=ALPHA).save_pretrained(str(folder))
    return folder


def skyrl_archive(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=0) as gz,
        tarfile.open(fileobj=gz, mode="w:") as tar,
    ):
        tar.add(folder, arcname="")
    return buffer.getvalue()


def hostile_archive(add: Any) -> bytes:
    """A tar.gz with the two good members, then whatever `add(tar)` puts in."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            data = b"{}" if name.endswith(".json") else b"x"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        add(tar)
    return buffer.getvalue()


def applied(model: Any, tensors: dict[str, torch.Tensor]) -> Any:
    """`model` with each LoRA's product added to its weight by hand (scaling alpha / r), the
    embedding's on the input lookup only: what the adapter means, independent of PEFT."""
    out = copy.deepcopy(model)
    head, embed = out.get_output_embeddings(), out.get_input_embeddings()
    if head.weight is embed.weight:
        head.weight = torch.nn.Parameter(embed.weight.detach().clone())
    with torch.no_grad():
        for key, a in tensors.items():
            if not key.endswith("lora_A.weight"):
                continue
            module = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
            b = tensors[key.replace("lora_A", "lora_B")]
            delta = a @ b if module.endswith("embed_tokens") else b @ a
            out.get_submodule(module).weight += (ALPHA / RANK) * delta
    return out.eval()


# --- the engine's two routes -------------------------------------------------------------------


@dataclass
class FakeEngine:
    url: str
    archives: dict[tuple[str, str], bytes] = field(default_factory=dict)
    pending: set[tuple[str, str]] = field(default_factory=set)
    requests: list[str] = field(default_factory=list)


@pytest.fixture
def engine() -> Iterator[FakeEngine]:
    state = FakeEngine("")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append(self.path)
            match = ARCHIVE_ROUTE.match(self.path)
            if match is None:
                return self._json(404, {"detail": "Not Found"})
            model_id, name, route = match.groups()
            if (model_id, name) in state.pending:
                return self._json(425, {"detail": "Checkpoint is still being created"})
            if (model_id, name) not in state.archives:
                return self._json(404, {"detail": f"Checkpoint not found: {model_id}/{name}"})
            if route == "archive":
                self.send_response(302)
                self.send_header("Location", f"{state.url}/api/v1/training_runs/{model_id}/checkpoints/{name}/download")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            body = state.archives[(model_id, name)]
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Disposition", f'attachment; filename="{model_id}_{name}.tar.gz"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None

        def _json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    with loopback_http(Handler) as url:
        state.url = url
        yield state


@pytest.fixture(scope="module")
def base() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    ensure_model(MODEL)
    return load_base_model(MODEL, "cpu")


@pytest.fixture(scope="module")
def tensors(base: Any) -> dict[str, torch.Tensor]:
    return skyrl_tensors(base.model)


@pytest.fixture
def served(engine: FakeEngine, tensors: dict[str, torch.Tensor], tmp_path: Path) -> FakeEngine:
    engine.archives[(MODEL_ID, CHECKPOINT)] = skyrl_archive(skyrl_folder(tmp_path / "engine-side", tensors))
    return engine


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- the folder --------------------------------------------------------------------------------


def test_the_archive_becomes_a_peft_folder_holding_every_module(
    served: FakeEngine, base: Any, tensors: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    seen: list[float] = []
    folder = download_engine_weights(
        f"tinker://{MODEL_ID}/{CHECKPOINT}", tmp_path / "out" / "adapter", served.url, MODEL, seen.append
    )
    assert served.requests == [
        f"/api/v1/training_runs/{MODEL_ID}/checkpoints/{CHECKPOINT}/archive",
        f"/api/v1/training_runs/{MODEL_ID}/checkpoints/{CHECKPOINT}/download",
    ]
    assert seen and seen[-1] == 1.0
    assert sorted(p.name for p in folder.iterdir()) == ["adapter_config.json", "adapter_model.safetensors"]
    assert [p.name for p in folder.parent.iterdir()] == ["adapter"]  # no staging left beside it
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["target_modules"] == sorted([*LINEAR, "embed_tokens", "lm_head"])
    assert (config["r"], config["lora_alpha"], config["task_type"]) == (RANK, ALPHA, "CAUSAL_LM")
    assert config["base_model_name_or_path"] == model_ref(MODEL)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = PeftModel.from_pretrained(copy.deepcopy(base.model), str(folder)).eval()
    assert not [w for w in caught if re.search(r"missing|unexpected", str(w.message), re.I)]
    # every tensor of the file went into the model and the model holds no other LoRA weight
    loaded = get_peft_model_state_dict(model, save_embedding_layers=False)
    written = load_file(str(folder / "adapter_model.safetensors"))
    assert loaded.keys() == written.keys()
    assert all(torch.equal(loaded[k], written[k]) for k in written)
    layers = base.model.config.num_hidden_layers
    for module in LINEAR:
        assert sum(f".{module}.lora_B." in k for k in loaded) == layers, module
    # and computes what the engine's tensors say (embedding LoRA on the lookup, transposed right)
    ids = torch.tensor([base.tokenizer.encode("The cat sat on 12 mats.")])
    with torch.no_grad():
        got, want, plain = model(ids).logits, applied(base.model, tensors)(ids).logits, base.model(ids).logits
    assert torch.allclose(got, want, atol=1e-4), (got - want).abs().max()
    assert (want - plain).abs().max() > 0.1  # the adapter changes the outputs: the check means something

    # the sampler_weights spelling of the same checkpoint; a second download replaces the first
    again = download_engine_weights(
        f"tinker://{MODEL_ID}/sampler_weights/{CHECKPOINT}", folder, served.url, str(model_ref(MODEL))
    )
    assert again == folder and json.loads((folder / "adapter_config.json").read_text()) == config
    assert [p.name for p in folder.parent.iterdir()] == ["adapter"]


def test_a_tied_output_head_is_untied_before_the_embedding_lora_is_merged(tmp_path: Path) -> None:
    """The engine applies the embedding LoRA to the lookup only, never to a tied head (SmolLM2)."""
    config = LlamaConfig(
        vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    tied = LlamaForCausalLM(config).eval()
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    raw = skyrl_tensors(tied, seed=1)
    assert not any("lm_head" in k for k in raw)
    folder = skyrl_folder(tmp_path / "adapter", raw)
    normalize(folder, "/models/tied")
    ids = torch.tensor([[5, 17, 42, 99, 3, 250]])
    with torch.no_grad():
        want = applied(tied, raw)(ids).logits
        unmerged = PeftModel.from_pretrained(copy.deepcopy(tied), str(folder)).eval()(ids).logits
        assert torch.allclose(unmerged, want, atol=1e-4)
        naive = PeftModel.from_pretrained(copy.deepcopy(tied), str(folder)).merge_and_unload()(ids).logits
        assert not torch.allclose(naive, want, atol=1e-2)  # merging into the tied head changes the policy

        model = copy.deepcopy(tied)
        assert untie_output_head(model, folder) and model.lm_head.weight is not model.model.embed_tokens.weight
        merged = PeftModel.from_pretrained(model, str(folder)).merge_and_unload().eval()
        assert torch.allclose(merged(ids).logits, want, atol=1e-4)
        merged.save_pretrained(tmp_path / "merged")  # the merged export loads back untied
        reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "merged", dtype=torch.float32).eval()
        assert torch.allclose(reloaded(ids).logits, want, atol=1e-4)

    untied = copy.deepcopy(merged)
    assert not untie_output_head(untied, folder)  # nothing tied: nothing to do
    linear_only = skyrl_folder(tmp_path / "linear", {k: v for k, v in raw.items() if "embed_tokens" not in k})
    normalize(linear_only, "/models/tied")
    assert not untie_output_head(copy.deepcopy(tied), linear_only)


# --- failures ----------------------------------------------------------------------------------


def test_missing_pending_and_unreachable_checkpoints_say_what_to_do(
    engine: FakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TINKER_BASE_URL", raising=False)
    engine.pending.add((MODEL_ID, "step-000003"))
    dest = tmp_path / "out" / "adapter"
    with pytest.raises(EngineWeightsError) as missing:
        download_engine_weights(f"tinker://{MODEL_ID}/step-000009", dest, engine.url, MODEL)
    text = str(missing.value)
    assert "404" in text and "no sampler checkpoint" in text and f"{engine.url}/api/v1/training_runs/" in text
    with pytest.raises(EngineWeightsError, match=r"still being written.*425.*retry in a few seconds"):
        download_engine_weights(f"tinker://{MODEL_ID}/step-000003", dest, engine.url, MODEL)
    closed = f"http://127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    with pytest.raises(EngineWeightsError) as refused:
        download_engine_weights(f"tinker://{MODEL_ID}/step-000002", dest, closed, MODEL, connect_timeout_s=5)
    assert time.monotonic() - started < 10
    assert "not running" in str(refused.value) and closed in str(refused.value) and "retry" in str(refused.value)
    assert list(dest.parent.iterdir()) == []  # nothing half-written

    with pytest.raises(EngineWeightsError, match="training state"):
        parse_checkpoint_path(f"tinker://{MODEL_ID}/weights/step-000002")
    for bad in ("tinker://a/b/c/d", "tinker://a/../b", "file:///etc/passwd", f"tinker://{MODEL_ID}"):
        with pytest.raises(EngineWeightsError, match="expected tinker://MODEL_ID/NAME"):
            parse_checkpoint_path(bad)
    with pytest.raises(EngineWeightsError, match="no engine URL"):
        download_engine_weights(f"tinker://{MODEL_ID}/x", dest, None, MODEL)


def _member(name: str, kind: bytes, link: str = "") -> Any:
    def add(tar: tarfile.TarFile) -> None:
        info = tarfile.TarInfo(name)
        info.type, info.linkname = kind, link
        data = b"" if kind != tarfile.REGTYPE else b"owned"
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    return add


@pytest.mark.parametrize(
    ("add", "why"),
    [
        (_member("../escaped.txt", tarfile.REGTYPE), "out of its folder"),
        (_member("sub/../../escaped.txt", tarfile.REGTYPE), "out of its folder"),
        (_member("/etc/escaped.txt", tarfile.REGTYPE), "out of its folder"),
        (_member("evil", tarfile.SYMTYPE, "/etc/passwd"), "not a plain file"),
        (_member("hard", tarfile.LNKTYPE, "adapter_config.json"), "not a plain file"),
        (_member("fifo", tarfile.FIFOTYPE), "not a plain file"),
        (_member("adapter_config.json", tarfile.REGTYPE), "twice"),
    ],
)
def test_an_archive_with_odd_members_is_refused(engine: FakeEngine, tmp_path: Path, add: Any, why: str) -> None:
    engine.archives[(MODEL_ID, "bad")] = hostile_archive(add)
    dest = tmp_path / "out" / "adapter"
    with pytest.raises(EngineWeightsError, match=why):
        download_engine_weights(f"tinker://{MODEL_ID}/bad", dest, engine.url, MODEL)
    assert list((tmp_path / "out").iterdir()) == [] and not (tmp_path / "escaped.txt").exists()


def test_an_archive_without_the_adapter_is_refused(engine: FakeEngine, tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("adapter_config.json")
        tar.addfile(info, io.BytesIO(b""))
    engine.archives[(MODEL_ID, "half")] = buffer.getvalue()
    engine.archives[(MODEL_ID, "junk")] = b"not a tarball"
    with pytest.raises(EngineWeightsError, match="lacks adapter_model.safetensors"):
        download_engine_weights(f"tinker://{MODEL_ID}/half", tmp_path / "a", engine.url, MODEL)
    with pytest.raises(EngineWeightsError, match="not a readable .tar.gz"):
        download_engine_weights(f"tinker://{MODEL_ID}/junk", tmp_path / "a", engine.url, MODEL)


# --- the product's paths: export, rl_test_inference -------------------------------------------


def _self_hosted_run(home: Path, url: str) -> RunRecord:
    files = RunFiles(home / "runs" / "arith-1")
    files.run_dir.mkdir(parents=True)
    tinker = {"backend": "tinker", "self_hosted": True, "tinker_base_url": url, "base_model": MODEL}
    files.config.write_text(yaml.safe_dump({"tinker": tinker}))
    for step in (1, 2):
        path = f"tinker://{MODEL_ID}/step-{step:06d}"
        record_checkpoint(files.run_dir, "arith-1", CheckpointKind.SAMPLER_WEIGHTS, f"step-{step:06d}", path, step=step)
    return RunRecord(
        run_id="arith-1", environment="arithmetic", profile="skyrl", status="completed", run_dir=str(files.run_dir),
        config_path=str(files.config), run_name="arith-1", total_steps=2, api_port=1, inference_port=2,
        created_at=time.time(),
    )  # fmt: skip


def test_a_self_hosted_run_plans_its_export_and_test_from_the_engine(rl_home: Path) -> None:
    rec = _self_hosted_run(rl_home, "http://127.0.0.1:8123")
    plan = plan_export(rec, 2, "merged", None, None)  # no training state needed, unlike Tinker's cloud
    assert plan.self_hosted and plan.tinker_state is None
    assert (plan.checkpoint.path, plan.tinker_base_url) == (f"tinker://{MODEL_ID}/step-000002", "http://127.0.0.1:8123")

    target = run_target(rec, pick_checkpoint(rec, None))
    base, trained = (target.local_weights(m) for m in target.models)
    assert (base.backend, base.adapter, base.engine_url) == ("local", None, None)
    assert (trained.backend, trained.engine_url) == ("local", "http://127.0.0.1:8123")
    req = InferenceRequest("arithmetic", Path("env.py"), {"env": {}}, 1, 2, 60.0, rl_home)
    config = process_config(req, target, target.models[1], run_dir=rl_home, inference_port=9, use_wandb=False)
    assert config["trainer"]["backend"] == "local" and config["trainer"]["self_hosted"] is True
    assert config["trainer"]["tinker_base_url"] == "http://127.0.0.1:8123"


def _export(tmp_path: Path, url: str, fmt: str) -> dict[str, Any]:
    prompts = tmp_path / "prompts.json"
    prompts.write_text("[]")
    result = tmp_path / f"{fmt}.json"
    argv = [sys.executable, "-m", "tinker_atropos.export", "--base-model", MODEL, "--format", fmt]
    argv += ["--engine-checkpoint", f"tinker://{MODEL_ID}/{CHECKPOINT}", "--tinker-base-url", url]
    argv += ["--out", str(tmp_path / fmt), "--name", "t", "--prompts", str(prompts)]
    argv += ["--progress", str(tmp_path / "p.jsonl"), "--result", str(result)]
    done = warm_children.run(argv, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert result.exists(), done.stderr[-3000:]
    return json.loads(result.read_text())


@pytest.mark.slow
def test_the_export_child_exports_an_engine_checkpoint(served: FakeEngine, tmp_path: Path) -> None:
    for fmt in ("adapter", "merged"):
        outcome = _export(tmp_path, served.url, fmt)
        assert "error" not in outcome, outcome
        check = outcome["verification"]
        assert check["ok"] and check["matches"] == check["prompts"] >= 1, outcome
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert "k_proj" in config["target_modules"] and "down_proj" in config["target_modules"]


def _serve(tmp_path: Path, url: str, port: int) -> tuple[warm_children.Forked | subprocess.Popen[bytes], Path]:
    config = {
        "env": {"tokenizer_name": str(ensure_model(MODEL))},
        "openai": [{"model_name": "trained", "base_url": f"http://127.0.0.1:{port}/v1", "server_type": "sglang"}],
        "trainer": {
            "backend": "local", "self_hosted": True, "tinker_base_url": url, "base_model": MODEL,
            "total_steps": 1, "device": "cpu", "api_url": "http://127.0.0.1:1", "inference_port": port,
            "run_dir": str(tmp_path),
        },
    }  # fmt: skip
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    log = tmp_path / "server.log"
    argv = [sys.executable, "-m", "tinker_atropos.inference_server", "--config", str(path)]
    argv += ["--adapter", f"tinker://{MODEL_ID}/{CHECKPOINT}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmp_path)}
    with log.open("wb") as err, open(os.devnull, "wb") as out:  # forked warm, as an inference test's is
        proc = warm_children.start(argv, env=env, stdout=out.fileno(), stderr=err.fileno(), cwd=ROOT)
    return proc, log


@pytest.mark.slow
def test_the_inference_server_serves_an_engine_checkpoint(
    served: FakeEngine, base: Any, tensors: dict[str, torch.Tensor], tmp_path: Path, free_port: Any
) -> None:
    port = free_port()
    proc, log = _serve(tmp_path, served.url, port)
    try:
        wait_healthy(proc, f"http://127.0.0.1:{port}", log, 120)
        chat = [{"role": "user", "content": "Say hello."}]
        reply = httpx.post(
            f"http://127.0.0.1:{port}/v1/chat/completions",
            timeout=60,
            json={"model": "trained", "messages": chat, "max_tokens": 8, "temperature": 0.0},
        ).json()["choices"][0]["message"]["content"]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
    prompt = base.tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    ids = torch.tensor([base.tokenizer.encode(prompt, add_special_tokens=False)])
    expected = {}
    for name, model in (("adapter", applied(base.model, tensors)), ("base", base.model)):
        out = model.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=base.eos_token_ids)
        expected[name] = base.tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert reply == expected["adapter"] != expected["base"], (reply, expected)
    assert not list(tmp_path.glob("rl-mcp-engine-weights-*"))  # the download went with the load


@pytest.mark.slow
def test_the_inference_server_says_when_the_engine_is_not_running(tmp_path: Path, free_port: Any) -> None:
    proc, log = _serve(tmp_path, f"http://127.0.0.1:{_closed_port()}", free_port())
    try:
        assert proc.wait(120) == 3, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "not running" in log.read_text()
