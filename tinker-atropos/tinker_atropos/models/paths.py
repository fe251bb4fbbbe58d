"""Where offline models live. Torch-free, so the MCP server can point configs at them cheaply."""

from __future__ import annotations

import os
from pathlib import Path

TINY_CHAT = "tiny-chat"
SMOLLM2 = "smollm2-135m"
OFFLINE_MODELS = (TINY_CHAT, SMOLLM2)
BUILD_STAMP = "tinker_atropos_build.json"  # written into a model folder once its build is complete


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


def is_built(name: str) -> bool:
    """Whether offline model `name` has been built (its build stamp is written last)."""
    return (model_dir(name) / BUILD_STAMP).is_file()


def offline_model_named(ref: str) -> str | None:
    """The offline model `ref` names, by name or by its folder; None for a hub id or another folder."""
    if is_offline_model(ref):
        return ref
    return next((name for name in OFFLINE_MODELS if str(model_dir(name)) == ref), None)


def model_ref(name: str) -> str:
    """What to hand to `from_pretrained`: the offline folder, else the name (hub id or folder)."""
    return str(model_dir(name)) if is_offline_model(name) else name
