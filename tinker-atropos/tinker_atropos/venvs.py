"""Where the venvs the product runs code in are (stdlib only: the server imports it too).

verifiers' pins conflict with the product's (datasets, regex, openai, mcp) and with each other's
(0.1.14 vs 0.4.0), and OpenEnv's (fastmcp 3, so mcp < 2) with the product's mcp 2: each has a venv of
its own, a runtime the product makes on first use (`mcp-server-rl setup NAME`, rl_mcp/runtimes/) under one
folder; an environment variable points one elsewhere. The environment process stays on the training
runtime and runs a child on the other one (verifiers' child, OpenEnv's server).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

RUNTIMES_VAR = "RL_MCP_RUNTIMES"
# The trainer's imports: a Python that has them all (a checkout's .venv) is the training runtime itself.
TRAINING_MODULES = ("torch", "transformers", "peft", "atroposlib", "tinker")


def nvidia_gpu() -> bool:
    """Whether this machine has an NVIDIA GPU, by its driver's files (nothing imported): the server picks
    vLLM's CUDA build with it, and a run's vLLM server leaves the trainer its share of the GPU."""
    return Path("/proc/driver/nvidia/version").exists() or Path("/dev/nvidia0").exists()


def runtimes_dir(environ: Mapping[str, str]) -> Path:
    """Where the product's runtimes live: $RL_MCP_RUNTIMES, else `runtimes/` in the product's cache
    ($RL_MCP_CACHE, else $RL_MCP_HOME/cache, as rl_mcp.settings reads them), beside the user's data."""
    if raw := environ.get(RUNTIMES_VAR):
        return Path(raw).expanduser().absolute()
    home = Path(environ.get("RL_MCP_HOME") or "~/.rl-mcp").expanduser()
    return Path(environ.get("RL_MCP_CACHE") or home / "cache").expanduser().absolute() / "runtimes"


def runtime_venv(name: str, environ: Mapping[str, str]) -> Path:
    """The folder of the runtime called `name` (it may not be made yet)."""
    return runtimes_dir(environ) / name


def runtime_python(name: str, environ: Mapping[str, str]) -> Path:
    return runtime_venv(name, environ) / "bin" / "python"


def hermes_bin(environ: Mapping[str, str]) -> Path:
    """hermes-agent's `hermes` in the product's hermes runtime (rl_mcp/runtimes/catalog.py)."""
    return runtime_venv("hermes", environ) / "bin" / "hermes"


@functools.cache
def server_trains() -> bool:
    """Whether this Python has the trainer's imports (a checkout's .venv, `pip install mcp-server-rl[local]`):
    asked at every call that needs the training runtime, answered once a process."""
    return all(importlib.util.find_spec(m) is not None for m in TRAINING_MODULES)


def training_python(environ: Mapping[str, str]) -> str:
    """Where the product's children run: this Python where it has the trainer, else the training
    runtime (made on first use)."""
    return sys.executable if server_trains() else str(runtime_python("training", environ))


@dataclass(frozen=True)
class Generation:
    """One format's generation: its format name, the runtime it runs in (or the venv a variable names),
    the child it runs there."""

    format: str
    venv_var: str
    runtime: str
    child_file: Path

    def python(self, environ: Mapping[str, str]) -> Path:
        if raw := environ.get(self.venv_var):
            return Path(raw) / "bin" / "python"
        return runtime_python(self.runtime, environ)


CLASSIC = Generation(
    format="verifiers",
    venv_var="RL_MCP_VERIFIERS_VENV",
    runtime="verifiers",
    child_file=Path(__file__).with_name("verifiers") / "classic_child.py",
)
V1 = Generation(
    format="verifiers-v1",
    venv_var="RL_MCP_VERIFIERS_V1_VENV",
    runtime="verifiers-v1",
    child_file=Path(__file__).with_name("verifiers") / "v1_child.py",
)
OPENENV = Generation(
    format="openenv",
    venv_var="RL_MCP_OPENENV_VENV",
    runtime="openenv",
    child_file=Path(__file__).with_name("openenv") / "serve.py",
)
GENERATIONS = {g.format: g for g in (CLASSIC, V1, OPENENV)}


def site_dirs(python: str | Path) -> list[Path]:
    """The site-packages folders of the venv whose interpreter is `python` (`<venv>/bin/python`)."""
    return sorted(Path(python).parent.parent.glob("lib/python3*/site-packages"))


def packages_stamp(python: str | Path, environ: Mapping[str, str]) -> tuple[int, ...]:
    """Changes when a package is installed or removed where `python`'s processes import from: its venv's
    site-packages and the PYTHONPATH folders (each gains or drops an entry, so its mtime moves). What
    was read from a process of that interpreter (an introspected schema, a warm template's imports)
    holds while this does."""
    folders = site_dirs(python)
    folders += [Path(p) for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    stamps = []
    for folder in folders:
        try:
            stamps.append(folder.stat().st_mtime_ns)
        except OSError:
            stamps.append(0)
    return tuple(stamps)


def verifiers_venvs(environ: Mapping[str, str]) -> dict[str, Path]:
    """Each verifiers API generation's format -> the Python of its venv (discovery lists what is installed there)."""
    return {g.format: g.python(environ) for g in (CLASSIC, V1)}
