"""The `tiny-chat` model: a byte-level tokenizer with a ChatML template and a small Llama,
built offline from a fixed seed so every machine gets the same weights with no hub access."""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from transformers.utils import logging as hf_logging

VERSION = 2  # bump whenever the recipe changes: cached builds are then rebuilt
SEED = 0
HIDDEN = 128
ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _byte_alphabet() -> list[str]:
    """The GPT-2 byte -> printable-char table, indexed by byte value (token id == byte value)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), 256)]
    table: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {ch: i for i, ch in enumerate(_byte_alphabet())}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True) for t in (ENDOFTEXT, IM_START, IM_END)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        unk_token=None,
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )


def build_model(tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    eos, pad = tokenizer.convert_tokens_to_ids([IM_END, ENDOFTEXT])
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=3 * HIDDEN,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
        torch_dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = LlamaForCausalLM(config)
        # The output head only sees RMS-normalised states of norm ~sqrt(HIDDEN), and LoRA never
        # trains it: with the usual 0.02 init no token could pass ~2% probability. Unit-norm rows
        # give initial logits of std ~1 and let training reach confident outputs. (Untied: a
        # large tied embedding would make every token predict itself.)
        torch.nn.init.normal_(model.get_output_embeddings().weight, std=HIDDEN**-0.5)
    model.generation_config = GenerationConfig(eos_token_id=[eos, pad], pad_token_id=pad)
    return model


def build(folder: Path) -> None:
    """Write tokenizer + model into `folder` (which must not exist yet)."""
    hf_logging.disable_progress_bar()
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder)
