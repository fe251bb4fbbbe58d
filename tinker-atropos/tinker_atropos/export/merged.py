"""`merged`: base model + LoRA merged into plain weights, saved as a transformers folder that
`AutoModelForCausalLM.from_pretrained(folder)` loads with no PEFT installed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from peft import PeftModel

MERGED_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def merge(base_model: Any, adapter_dir: Path) -> Any:
    """A float32 copy of the base with the adapter merged in (the trained policy's exact weights)."""
    import copy

    return PeftModel.from_pretrained(copy.deepcopy(base_model), str(adapter_dir)).merge_and_unload()


def write_merged(model: Any, tokenizer: Any, out: Path, dtype: str) -> list[Path]:
    """safetensors, config, generation config, tokenizer with its chat template."""
    if dtype not in MERGED_DTYPES:
        raise ValueError(f"merged dtype {dtype!r} is not one of {', '.join(MERGED_DTYPES)}")
    out.mkdir(parents=True, exist_ok=True)
    model.to(MERGED_DTYPES[dtype]).save_pretrained(out, safe_serialization=True)
    model.to(torch.float32)
    tokenizer.save_pretrained(out)
    return sorted(p for p in out.iterdir() if p.is_file())
