"""A Python of a given version for a runtime that needs one (verifiers v1 and SkyRL's engine: 3.12)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping


def find_python(version: str, environ: Mapping[str, str]) -> str | None:
    """$RL_MCP_PYTHON<major><minor> when set, else pyenv's `version` (or its `.1`), else `python<version>`
    on PATH; each asked for its own version, so a shim that answers with another Python is passed over."""
    named = environ.get(f"RL_MCP_PYTHON{version.replace('.', '')}")
    candidates = [(named, environ)] if named else []
    for pyenv in (version, f"{version}.1"):
        candidates.append((f"python{version}", {**environ, "PYENV_VERSION": pyenv}))
    candidates.append((f"python{version}", dict(environ)))
    for name, env in candidates:
        exe = shutil.which(name, path=env.get("PATH")) if name else None
        if exe is None:
            continue
        argv = [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2], sys.executable)"]
        try:
            out = subprocess.run(argv, env=dict(env), capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        found = out.stdout.split()
        if out.returncode == 0 and len(found) == 2 and found[0] == version:
            return found[1]
    return None
