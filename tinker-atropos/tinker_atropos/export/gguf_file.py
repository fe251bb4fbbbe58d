"""`gguf`: a transformers Llama-type causal LM and its tokenizer written as one GGUF file.

The file follows llama.cpp's conventions (key names, tensor names, the rotary layout of the query
and key weights), so llama.cpp and Ollama run it, and `from_pretrained(folder, gguf_file=name)`
in transformers loads it back into the same model. Tensors are converted and written one at a
time, so the float32 model is never held twice in memory.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import torch

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM",)
GGUF_TYPES = ("f16", "q8_0")

_FILE_TYPES = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}
_Q8_0 = gguf.GGMLQuantizationType.Q8_0
_F16 = gguf.GGMLQuantizationType.F16
_F32 = gguf.GGMLQuantizationType.F32


class UnsupportedArchitecture(ValueError):
    """The model is not one whose weights this writer knows how to lay out for llama.cpp."""

    def __init__(self, architecture: str) -> None:
        self.architecture = architecture
        super().__init__(
            f"cannot write a GGUF file for a {architecture} model: supported architectures are "
            f"{', '.join(SUPPORTED_ARCHITECTURES)}"
        )


def write_gguf(
    model: Any,
    tokenizer: Any,
    path: Path,
    dtype: str,
    *,
    name: str,
    progress: Callable[[float], None] | None = None,
) -> Path:
    """Write `model` (float32 weights, LoRA merged) and `tokenizer` to `path` as a GGUF file.

    `dtype` is "f16" (every matrix in half precision) or "q8_0" (matrices in llama.cpp's 8-bit
    blocks). Norms and other vectors stay float32 in both, as llama.cpp's own converter does.
    Everything is checked before the file is opened, and the file is written under a temporary
    name then renamed, so `path` is either absent or complete. Returns `path`.
    """
    if dtype not in GGUF_TYPES:
        raise ValueError(f"GGUF type {dtype!r} is not one of {', '.join(GGUF_TYPES)}")
    architecture = type(model).__name__
    if architecture not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitecture(architecture)
    config = model.config
    rows = model.get_input_embeddings().weight.shape[0]
    vocab = _ByteLevelVocab(tokenizer, rows)
    tensors = list(_llama_tensors(model))  # (GGUF name, weight, heads to permute for): no copies yet

    partial = path.with_name(path.name + ".partial")
    writer = gguf.GGUFWriter(partial, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.LLAMA])
    try:
        writer.add_type(gguf.GGUFType.MODEL)
        writer.add_name(name)
        writer.add_file_type(_FILE_TYPES[dtype])
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        _add_hyperparameters(writer, config, rows)
        vocab.add_to(writer)
        # The header lists every tensor's shape, type and size before any data, so plan them all
        # first and only then convert and write each tensor in turn.
        qtypes = [_tensor_type(tensor, dtype) for _, tensor, _ in tensors]
        for (gguf_name, tensor, _), qtype in zip(tensors, qtypes, strict=True):
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            # With an explicit raw type and a non-uint8 dtype, the writer keeps the logical shape.
            writer.add_tensor_info(gguf_name, tensor.shape, np.dtype(np.float32), tensor.numel() // block * size, qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        if progress is not None:
            progress(0.0)
        for done, ((_, tensor, heads), qtype) in enumerate(zip(tensors, qtypes, strict=True), start=1):
            if heads is not None:
                tensor = _interleave_rotary_halves(tensor, heads)
            writer.write_tensor_data(_encode(tensor, qtype))
            if progress is not None:
                progress(done / len(tensors))
        writer.close()
        os.replace(partial, path)
    except BaseException:
        writer.close()
        partial.unlink(missing_ok=True)
        raise
    return path


def _add_hyperparameters(writer: gguf.GGUFWriter, config: Any, rows: int) -> None:
    """llama.* keys: what llama.cpp builds its graph from, and what transformers rebuilds the config from."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        # Scaled rotary embeddings change every position's angles; transformers does not read the
        # scaling back from a llama GGUF, so the file would load as a different model.
        raise ValueError(f"cannot write a GGUF file for rope scaling {rope_type!r}: only unscaled rope is supported")
    theta = rope.get("rope_theta", getattr(config, "rope_theta", None))
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(getattr(config, "num_key_value_heads", None) or heads)
    if theta is not None:
        writer.add_rope_freq_base(float(theta))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_vocab_size(rows)
    writer.add_rope_dimension_count(head_dim)
    if head_dim != config.hidden_size // heads:  # llama.cpp assumes hidden_size / heads otherwise
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)


def _llama_tensors(model: Any) -> Iterator[tuple[str, torch.Tensor, int | None]]:
    """(GGUF name, weight, head count) for every weight; the count is set for attn_q / attn_k,
    whose rows must be permuted (see `_interleave_rotary_halves`) as they are written.

    A tied output head is left out: llama.cpp and transformers both reuse token_embd.weight when
    the file has no output.weight, and writing it twice would untie it on load.
    """
    config = model.config
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    embedding = model.get_input_embeddings().weight
    head = model.get_output_embeddings()
    tied = head is None or head.weight is embedding or torch.equal(head.weight, embedding)
    for hf_name, tensor in model.state_dict().items():
        if hf_name.endswith("rotary_emb.inv_freq") or (tied and hf_name == "lm_head.weight"):
            continue
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if gguf_name is None:
            raise ValueError(f"no GGUF name for tensor {hf_name!r} of a llama model")
        permute = heads if ".attn_q." in gguf_name else kv_heads if ".attn_k." in gguf_name else None
        yield gguf_name, tensor, permute


def _interleave_rotary_halves(weight: torch.Tensor, heads: int) -> torch.Tensor:
    """Reorder each head's output rows from transformers' rotary layout to llama.cpp's.

    transformers rotates dimension i of a head with dimension i + head_dim/2 (two halves);
    llama.cpp's llama rope rotates dimensions 2i and 2i+1 (adjacent pairs). Moving row
    i + head_dim/2 next to row i makes the two compute the same attention scores. transformers'
    GGUF loader undoes exactly this when it reads attn_q / attn_k back.
    """
    rows = weight.shape[0]
    halves = weight.reshape(heads, 2, rows // heads // 2, *weight.shape[1:])
    return halves.transpose(1, 2).reshape(weight.shape)


def _tensor_type(tensor: torch.Tensor, dtype: str) -> gguf.GGMLQuantizationType:
    """F32 for vectors (norms: tiny, and precision there matters); F16 or Q8_0 for matrices.

    Q8_0 packs each run of 32 values of a row into one block, so a row whose length is not a
    multiple of 32 cannot be stored that way and falls back to F16.
    """
    if tensor.dim() < 2:
        return _F32
    block, _ = gguf.GGML_QUANT_SIZES[_Q8_0]
    if dtype == "q8_0" and tensor.shape[-1] % block == 0:
        return _Q8_0
    return _F16


def _encode(tensor: torch.Tensor, qtype: gguf.GGMLQuantizationType) -> np.ndarray:
    """The bytes of one tensor as `qtype` (float32 first, whatever the model's dtype or device)."""
    data = tensor.detach().to("cpu", torch.float32).contiguous().numpy()
    if qtype == _F32:
        return data
    if qtype == _F16:
        return data.astype(np.float16)
    return gguf.quants.quantize(data, qtype)


class _ByteLevelVocab:
    """A byte-level BPE tokenizer as llama.cpp's "gpt2" tokenizer metadata.

    The tokens (in id order, padded to the embedding's row count), their types, the merges, the
    special token ids and the pre-tokenizer name. Anything else (sentencepiece, WordPiece, a split
    rule llama.cpp has no name for) is refused: the file would tokenize text differently.
    """

    def __init__(self, tokenizer: Any, rows: int) -> None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError(
                f"cannot write a GGUF tokenizer from {type(tokenizer).__name__}: it needs a fast tokenizer"
            )
        spec = json.loads(backend.to_str())
        model = spec["model"]
        if model.get("type") != "BPE" or model.get("byte_fallback") or not _mentions_byte_level(spec):
            raise ValueError(
                "cannot write a GGUF file for this tokenizer: only byte-level BPE tokenizers (GPT-2 style) "
                f"are supported, not {model.get('type')} with a {_kind(spec.get('pre_tokenizer'))} pre-tokenizer"
            )
        self.merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
        if not self.merges:
            # gguf-py cannot write an empty array, and llama.cpp refuses a "gpt2" vocabulary without one.
            raise ValueError("cannot write a GGUF file for a BPE tokenizer with no merges")
        self.pre = _pre_tokenizer_name(spec.get("pre_tokenizer"))
        by_id = {index: token for token, index in backend.get_vocab(with_added_tokens=True).items()}
        if max(by_id) >= rows:
            raise ValueError(f"the tokenizer has token id {max(by_id)} but the model has only {rows} embeddings")
        added = backend.get_added_tokens_decoder()
        self.tokens: list[str] = []
        self.types: list[int] = []
        for index in range(rows):
            token = by_id.get(index)
            if token is None:  # rows the model has but the tokenizer never produces
                self.tokens.append(f"[PAD{index}]")
                self.types.append(gguf.TokenType.UNUSED)
            else:
                self.tokens.append(token)
                kind = added.get(index)
                if kind is None:
                    self.types.append(gguf.TokenType.NORMAL)
                else:
                    self.types.append(gguf.TokenType.CONTROL if kind.special else gguf.TokenType.USER_DEFINED)
        self.special = {
            "bos": tokenizer.bos_token_id,
            "eos": tokenizer.eos_token_id,
            "unk": tokenizer.unk_token_id,
            "pad": tokenizer.pad_token_id,
        }
        # What the tokenizer actually does, rather than a flag that not every tokenizer class keeps.
        with_specials = tokenizer("a", add_special_tokens=True)["input_ids"]
        plain = tokenizer("a", add_special_tokens=False)["input_ids"]
        bos, eos = self.special["bos"], self.special["eos"]
        self.add_bos = bos is not None and with_specials[:1] == [bos] and plain[:1] != [bos]
        self.add_eos = eos is not None and with_specials[-1:] == [eos] and plain[-1:] != [eos]
        template = getattr(tokenizer, "chat_template", None)
        if isinstance(template, dict):
            template = [{"name": key, "template": value} for key, value in template.items()]
        self.chat_template = template

    def add_to(self, writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(self.pre)
        writer.add_token_list(self.tokens)
        writer.add_token_types(self.types)
        writer.add_token_merges(self.merges)
        adders = {
            "bos": writer.add_bos_token_id,
            "eos": writer.add_eos_token_id,
            "unk": writer.add_unk_token_id,
            "pad": writer.add_pad_token_id,
        }
        for key, token_id in self.special.items():
            if token_id is not None:
                adders[key](token_id)
        writer.add_add_bos_token(self.add_bos)
        writer.add_add_eos_token(self.add_eos)
        if self.chat_template:
            writer.add_chat_template(self.chat_template)


def _kind(node: dict[str, Any] | None) -> str:
    return "no" if not node else str(node.get("type"))


def _mentions_byte_level(spec: dict[str, Any]) -> bool:
    """Whether the pre-tokenizer or decoder maps bytes to GPT-2's printable alphabet."""
    return any(
        node.get("type") == "ByteLevel" for key in ("pre_tokenizer", "decoder") for node in _flatten(spec.get(key))
    )


def _flatten(node: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [leaf for child in node.get("pretokenizers", node.get("decoders", [])) for leaf in _flatten(child)]
    return [node]


def _pre_tokenizer_name(node: dict[str, Any] | None) -> str:
    """llama.cpp's name for the rule that cuts text into words before BPE merges them.

    llama.cpp does not run the tokenizer's own rule: it picks a built-in one by this name, and
    refuses names it does not know. A wrong name loads fine but tokenizes some text differently.
    """
    steps = _flatten(node)
    kinds = [step.get("type") for step in steps]
    if kinds == ["ByteLevel"] and steps[0].get("use_regex", True):
        return "gpt-2"
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits") and steps[1].get("use_regex", True):
        return "smollm"  # GPT-2's rule after splitting off every digit
    if kinds == ["Split", "ByteLevel"] and not steps[1].get("use_regex", True):
        pattern = steps[0].get("pattern", {}).get("Regex")
        for pre, regex in _known_splits().items():
            if regex == pattern:
                return pre
    raise ValueError(
        f"cannot write a GGUF file for this tokenizer: llama.cpp has no name for its pre-tokenizer {kinds}"
    )


def _known_splits() -> dict[str, str]:
    """llama.cpp pre-tokenizer names and their split regexes, as transformers' GGUF loader knows them."""
    try:
        from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_PRE_TOKENIZER_SPLITS
    except ImportError:  # an older or newer transformers: only the built-in rules above
        return {}
    return dict(GGUF_PRE_TOKENIZER_SPLITS)
