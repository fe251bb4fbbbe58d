"""Where the verifiers venvs are and how they are made (stdlib only: the server imports it too).

verifiers' pins conflict with the product's (datasets, regex, openai, mcp), so each API generation
has a venv of its own, made by `make verifiers`; `RL_MCP_VERIFIERS_VENV` points elsewhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]
CLASSIC_VENV_VAR = "RL_MCP_VERIFIERS_VENV"
CLASSIC_VENV = ".venv-verifiers"
MAKE_COMMAND = "make verifiers"
CHILD_FILE = Path(__file__).with_name("classic_child.py")


def classic_python(environ: Mapping[str, str]) -> Path:
    """The Python of the classic verifiers venv (verifiers 0.1.14)."""
    venv = environ.get(CLASSIC_VENV_VAR) or str(PROJECT_ROOT / CLASSIC_VENV)
    return Path(venv) / "bin" / "python"


def missing_venv_message(environ: Mapping[str, str]) -> str | None:
    """Why classic verifiers environments cannot run here, with the command that fixes it; None if they can."""
    python = classic_python(environ)
    if python.exists():
        return None
    return (
        f"verifiers environments run in a venv of their own, and {python} does not exist: "
        f"run `{MAKE_COMMAND}` in {PROJECT_ROOT} (about 1 minute, 700 MB), or point {CLASSIC_VENV_VAR} "
        "at a venv with verifiers==0.1.14"
    )
