"""The venvs the product needs beside its own, made on first use (`mcp-server-rl setup` makes them ahead):
the training runtime, verifiers' two generations, OpenEnv's and SkyRL's engine. `catalog.py` says what
each holds, `maker.py` makes one safely, `installer.py` runs uv or pip, `inventory.py` says what exists."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path

from rl_mcp.distribution import command_line
from rl_mcp.runtimes import catalog, installer, maker
from tinker_atropos.venvs import GENERATIONS, server_trains


async def ensure_runtime(name: str, environ: Mapping[str, str], report: installer.Report | None = None) -> Path:
    """The Python of the runtime called `name`, made first when it is not (RuntimeUnavailable, with the
    command to run by hand, when it cannot be): the server's own for training where it has the trainer,
    and a venv named by a format's variable (RL_MCP_VERIFIERS_VENV, ...) as it is."""
    if name == "training" and server_trains():
        return Path(sys.executable)
    named = next((g for g in GENERATIONS.values() if g.runtime == name and environ.get(g.venv_var)), None)
    if named is not None:
        python = named.python(environ)
        if not python.exists():
            raise maker.RuntimeUnavailable(
                f"{named.venv_var} names {python.parent.parent}, which has no {python}: point it at a venv with "
                f"{' '.join(catalog.spec(name).passes[0])}, or unset it and the product makes its own "
                f"(on first use, or now: `{command_line('setup', name)}`)"
            )
        return python
    venv = await maker.ensure(catalog.spec(name), dict(environ), report or _quiet)
    return venv / "bin" / "python"


async def _quiet(message: str) -> None:
    return None
