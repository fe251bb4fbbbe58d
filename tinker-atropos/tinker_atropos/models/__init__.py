"""Models usable with no hub access: `tiny-chat` (built here) and `smollm2-135m` (from a wheel).

Any other name is handed to transformers as is (a hub id or a local folder).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from .paths import BUILD_STAMP as STAMP
from .paths import SMOLLM2, TINY_CHAT, cache_root, is_offline_model, model_dir, model_ref

__all__ = ["cache_root", "ensure_model", "eos_id_list", "model_dir", "model_ref", "resolve_model"]


def eos_id_list(generation_eos: int | list[int] | None, tokenizer_eos: int | None) -> list[int]:
    """A model's EOS ids as samplers stop on them: its generation config's, else its tokenizer's."""
    ids = tokenizer_eos if generation_eos is None else generation_eos
    return sorted({ids} if isinstance(ids, int) else set(ids or []))


def ensure_model(name: str) -> Path:
    """The folder of offline model `name`, built on first use (and rebuilt when its recipe changed).

    Built in a temporary sibling folder and renamed into place, so a reader never sees a
    half-written model and two processes building at once both end up with the same folder.
    """
    target = model_dir(name)
    recipe = _recipe(name)
    if _is_current(target, recipe):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        staging = tmp / name
        recipe.build(staging)
        (staging / STAMP).write_text(json.dumps({"name": name, "version": recipe.VERSION}))
        for _ in range(2):
            try:
                os.rename(staging, target)
                break
            except OSError:
                if _is_current(target, recipe):
                    break  # another process finished first: same recipe, same model
                with contextlib.suppress(OSError):  # stale build: move it out of the way
                    os.rename(target, tmp / "stale")
        else:
            raise OSError(f"could not move the {name} build into {target}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _is_current(folder: Path, recipe) -> bool:
    try:
        return json.loads((folder / STAMP).read_text())["version"] == recipe.VERSION
    except (OSError, ValueError, KeyError):
        return False


def resolve_model(name: str) -> str:
    """What `from_pretrained` should load for `name`: builds offline models when missing."""
    return str(ensure_model(name)) if is_offline_model(name) else model_ref(name)


def _recipe(name: str):
    """The module that builds `name`: it has build(folder) and VERSION."""
    if name == TINY_CHAT:
        from . import tiny as recipe
    elif name == SMOLLM2:
        from . import smollm2 as recipe
    else:  # pragma: no cover - model_dir() already rejected it
        raise ValueError(name)
    return recipe
