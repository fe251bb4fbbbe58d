"""Where offline models live. Torch-free, so the MCP server can point configs at them cheaply."""

from __future__ import annotations

import os
from pathlib import Path

TINY_CHAT = "tiny-chat"
SMOLLM2 = "smollm2-135m"
OFFLINE_MODELS = (TINY_CHAT, SMOLLM2)


def cache_root() -> Path:
    """`$TINKER_ATROPOS_CACHE`, else ~/.cache/tinker-atropos."""
    env = os.environ.get("TINKER_ATROPOS_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "tinker-atropos"


def is_offline_model(name: str) -> bool:
    return name in OFFLINE_MODELS


def model_dir(name: str) -> Path:
    """The folder an offline model (tiny-chat, smollm2-135m) is, or will be, built in."""
    if not is_offline_model(name):
        raise ValueError(f"{name!r} is not an offline model (known: {', '.join(OFFLINE_MODELS)})")
    return cache_root() / "models" / name


def model_ref(name: str) -> str:
    """What to hand to `from_pretrained`: the offline folder, else the name (hub id or folder)."""
    return str(model_dir(name)) if is_offline_model(name) else name
