"""Which children a template may fork, and which templates may fork them (pure).

A template has imported torch, transformers, peft and atroposlib under its own environment. What
those libraries read from the environment at import (huggingface_hub's HF_HUB_OFFLINE and cache
folders, torch's ATEN_CPU_CAPABILITY, the thread pools' OMP_/MKL_ settings, PYTHONPATH, HOME) is
read once, in the template: a child may only be forked from a template whose import-time variables
equal its own. Every other variable (the run's TMPDIR, keys, RL_MCP_* settings, W&B's, a test
runner's) is the child's own, set after the fork.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

# Read at import by the libraries a template imports (or by the interpreter at its start).
IMPORT_TIME_PREFIXES = (
    "HF_", "HUGGINGFACE_", "TRANSFORMERS_", "TOKENIZERS_", "SAFETENSORS_", "PEFT_", "ACCELERATE_", "DIFFUSERS_",
    "TORCH", "PYTORCH_", "ATEN_", "CUDA", "NVIDIA_", "TRITON_", "XLA_",
    "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "DNNL_", "ONEDNN_", "NUMEXPR_", "NUMBA_",
    "PYTHON", "LD_", "XDG_", "LC_",
)  # fmt: skip
IMPORT_TIME_NAMES = frozenset({"HOME", "PATH", "LANG", "LANGUAGE", "USER", "TZ"})
# read at import, but set again in the child after the fork (its streams, huggingface_hub's offline flag)
SET_BY_THE_CHILD = frozenset({"PYTHONUNBUFFERED", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"})
DISABLE_VAR = "RL_MCP_WARM_START"  # "0": every child starts cold


@dataclass(frozen=True)
class TemplateKey:
    """The interpreter and the import-time environment a template serves."""

    python: str
    env: tuple[tuple[str, str], ...]

    def environment(self) -> dict[str, str]:
        return dict(self.env)


def read_at_import(name: str) -> bool:
    if name in SET_BY_THE_CHILD:
        return False
    return name in IMPORT_TIME_NAMES or name.startswith(IMPORT_TIME_PREFIXES)


def template_key(
    argv: Sequence[str], env: Mapping[str, str], product_python: str, platform: str = sys.platform
) -> TemplateKey | None:
    """The template that may fork `argv` under `env`, or None when it must start cold: another
    interpreter (a verifiers or layered venv), interpreter flags, warm starts turned off, or not
    Linux (a child retitles itself through /proc and prctl; macOS's frameworks refuse a fork)."""
    if platform != "linux" or env.get(DISABLE_VAR) == "0" or len(argv) < 2 or argv[0] != product_python:
        return None
    if argv[1] == "-m":
        if len(argv) < 3:
            return None
    elif argv[1].startswith("-") or not argv[1].endswith(".py"):
        return None
    shared = tuple(sorted((k, v) for k, v in env.items() if read_at_import(k)))
    return TemplateKey(argv[0], shared)
