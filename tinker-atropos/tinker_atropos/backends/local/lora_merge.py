"""A saved LoRA adapter added straight into a model's float32 weights: the weights
`PeftModel.from_pretrained(model, adapter).merge_and_unload()` leaves, without building a PEFT model.

Every training step hands the environment a new sampler: a copy of the base with the step's adapter
merged in. PEFT's route first wraps each targeted layer in a LoRA layer (a few hundred modules built
and checked), then merges and unwraps them again (CPU s a sampler, bench/sampler_merge.py: tiny-chat
0.064 against 0.008 here, SmolLM2 0.81 against 0.28). Here each layer gets `W += (B @ A) * scaling`,
PEFT's own arithmetic for a plain LoRA, in its order: the same float32 weights, bit for bit
(tests/test_lora_merge.py). Any other adapter (DoRA, a LoRA on embeddings, per-module ranks, saved
whole modules, biases, a field this does not know) takes PEFT's route.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import torch
from safetensors.torch import load_file

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_FILE = "adapter_model.safetensors"
_KEY = re.compile(r"base_model\.model\.(?P<module>.+)\.lora_(?P<half>[AB])\.weight")
# adapter_config.json fields a plain LoRA may set: which layers it covers, its rank and scale, how it
# began (initialisation does not change how it merges). Any other field set (DoRA, a variant's
# config, saved whole modules, per-module ranks) means an adapter of another kind.
_PLAIN_FIELDS = frozenset(
    {"peft_type", "peft_version", "auto_mapping", "base_model_name_or_path", "revision", "task_type",
     "inference_mode", "target_modules", "exclude_modules", "layers_to_transform", "layers_pattern",
     "r", "lora_alpha", "use_rslora", "lora_dropout", "bias", "init_lora_weights", "loftq_config",
     "eva_config", "corda_config", "lora_ga_config", "megatron_core", "qalora_group_size",
     "ensure_weight_tying"}
)  # fmt: skip


def merge_plain_lora(model: torch.nn.Module, adapter: Path) -> bool:
    """Add the adapter saved in `adapter` to `model`'s weights in place. False, with `model`
    untouched, when the adapter is not a plain float32 LoRA of float32 linear layers."""
    config = json.loads((adapter / ADAPTER_CONFIG).read_text())
    weights_file = adapter / ADAPTER_FILE
    other = [k for k, v in config.items() if v and k not in _PLAIN_FIELDS]
    if config.get("peft_type") != "LORA" or config.get("bias", "none") != "none" or other or not weights_file.exists():
        return False
    rank = int(config["r"])
    scaling = config["lora_alpha"] / (math.sqrt(rank) if config.get("use_rslora") else rank)
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in load_file(weights_file).items():
        match = _KEY.fullmatch(key)
        if match is None or tensor.dtype != torch.float32:
            return False
        halves.setdefault(match["module"], {})[match["half"]] = tensor
    modules = dict(model.named_modules())
    pairs: list[tuple[torch.nn.Linear, torch.Tensor, torch.Tensor]] = []
    for name, ab in halves.items():
        layer = modules.get(name)
        if type(layer) is not torch.nn.Linear or set(ab) != {"A", "B"} or layer.weight.dtype != torch.float32:
            return False
        a, b = ab["A"], ab["B"]
        if a.shape != (rank, layer.in_features) or b.shape != (layer.out_features, rank):
            return False
        pairs.append((layer, a, b))
    with torch.no_grad():
        for layer, a, b in pairs:
            device = layer.weight.device
            layer.weight.data += (b.to(device) @ a.to(device)) * scaling
    return True
