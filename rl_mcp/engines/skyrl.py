"""SkyRL's Tinker engine as a command: its venv, its Python, its flags and environment (pure).

SkyRL 0.4.0's API server (`python -m skyrl.tinker.api`) starts its engine process itself, as
`uv run <the flags its own parent was started with> ... -m skyrl.tinker.engine`, which it reads from
its parent's command line. So the API server is started the one way upstream supports: under
`uv run` (uv pinned in the engine's venv), with `--no-project --offline --no-config` so uv neither
looks for a project nor touches the network, and `--python` naming the venv's interpreter.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rl_mcp.distribution import command_line
from rl_mcp.errors import UserError
from rl_mcp.runtimes.pythons import find_python
from tinker_atropos.venvs import runtime_venv

SKYRL_VERSION = "0.4.0"
VENV_VAR = "RL_MCP_SKYRL_VENV"
# The engine logs this once its model is loaded and it takes requests; /healthz answers earlier.
READY_MARKER = "Starting background engine"
# Its API server logs this when the engine process exits under it (then exits itself within 10 s).
CRASH_MARKER = "Background engine crashed"
# Sized for a 2-core, 24 GB machine: SkyRL's defaults (32 adapters, whole batches at once) grew the
# engine to 20.6 GB and the OOM killer ended it at the first optim_step. Slot 0 is the base model,
# so 3 adapters leave two: a run and a fork, resume or test beside it.
DEFAULT_BACKEND_CONFIG: dict[str, Any] = {
    "max_lora_adapters": 3,
    "max_lora_rank": 16,
    "train_micro_batch_size": 1,
    "sample_max_num_sequences": 8,
}
SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3_5ForCausalLM", "DeepseekV3ForCausalLM")


class EngineSetupError(UserError):
    """The engine cannot be started here: its venv, Python 3.12 or its model is missing."""


@dataclass(frozen=True)
class SkyrlSpec:
    """One engine: where it runs from, what it serves and where it keeps its state."""

    venv: Path
    model_name: str  # what runs call the base model (trainer.base_model)
    model_dir: Path  # the folder the engine loads in its place
    port: int
    state_dir: Path  # its database, checkpoints and uv cache
    backend_config: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_BACKEND_CONFIG))

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def checkpoints_dir(self) -> Path:
        return self.state_dir / "checkpoints"

    def argv(self) -> list[str]:
        uv = str(self.venv / "bin" / "uv")
        return [
            uv, "run", "--no-project", "--offline", "--no-config", "--python", str(self.python),
            "-m", "skyrl.tinker.api",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--base-model", self.model_name,
            "--base-model-checkpoint-path", str(self.model_dir),
            "--backend", "jax",
            "--backend-config", json.dumps(dict(self.backend_config), sort_keys=True),
            "--checkpoints-base", str(self.checkpoints_dir),
            "--database-url", f"sqlite:///{self.state_dir / 'engine.db'}",
            # a run's model is unloaded when it ends; one whose trainer was killed frees its slot soon
            "--session-timeout-sec", "60",
            "--session-cleanup-interval-sec", "10",
        ]  # fmt: skip

    def env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The server's environment (secrets already removed by the caller), offline, CPU JAX."""
        return {
            **environ,
            "PATH": f"{self.venv / 'bin'}{os.pathsep}{environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(self.venv),
            "UV_CACHE_DIR": str(self.state_dir / "uv-cache"),
            "UV_PYTHON_DOWNLOADS": "never",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "JAX_PLATFORMS": environ.get("JAX_PLATFORMS", "cpu"),
            # XLA's compiles (a minute or more per sequence-length bucket on a CPU) kept across starts, the
            # small ones too: the model's set-up is ~170 of them (6 s of each start, 1 s from the cache)
            "JAX_COMPILATION_CACHE_DIR": environ.get("JAX_COMPILATION_CACHE_DIR", str(self.state_dir / "xla-cache")),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": environ.get(
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0"
            ),
            "PYTHONUNBUFFERED": "1",
            "COLUMNS": "200",  # its rich log handler wraps at 80 columns off a terminal
        }


def default_venv(environ: Mapping[str, str]) -> Path:
    """$RL_MCP_SKYRL_VENV, else the product's `skyrl-engine` runtime (made on the engine's first start,
    or ahead by `mcp-server-rl setup skyrl-engine`)."""
    raw = environ.get(VENV_VAR)
    return Path(raw).expanduser().resolve() if raw else runtime_venv("skyrl-engine", environ)


def check_venv(venv: Path, environ: Mapping[str, str]) -> None:
    """EngineSetupError naming the command that makes the venv, or where Python 3.12 was looked for."""
    if (venv / "bin" / "uv").is_file() and (venv / "bin" / "python").exists():
        return
    setup = command_line("setup", "skyrl-engine")
    if find_python("3.12", environ) is None:
        raise EngineSetupError(
            "SkyRL's Tinker engine needs Python 3.12, and none was found (looked for RL_MCP_PYTHON312, "
            "pyenv's 3.12 and `python3.12` on PATH): install Python 3.12 (or uv, which fetches one), or set "
            f"RL_MCP_PYTHON312=/path/to/python3.12, then run `{setup}`"
        )
    named = f"{VENV_VAR} names {venv}, which" if environ.get(VENV_VAR) else f"its runtime {venv}"
    raise EngineSetupError(
        f"SkyRL's Tinker engine cannot start: {named} is missing or incomplete: run `{setup}` "
        "(a few minutes, once), or set RL_MCP_SKYRL_VENV to a venv with skyrl[tinker]==0.4.0, jax and uv"
    )


def check_model(model_name: str, model_dir: Path) -> None:
    """EngineSetupError when the engine could not load the folder (SkyRL reads a few architectures)."""
    try:
        config = json.loads((model_dir / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise EngineSetupError(f"base model {model_name!r}: cannot read {model_dir / 'config.json'} ({exc})") from exc
    names = [str(a) for a in config.get("architectures") or []]
    if not any(a in SUPPORTED_ARCHITECTURES for a in names):
        raise EngineSetupError(
            f"base model {model_name!r} ({', '.join(names) or 'no architectures in config.json'}) cannot be "
            f"loaded by SkyRL's Tinker engine {SKYRL_VERSION}, which serves {', '.join(SUPPORTED_ARCHITECTURES)}: "
            "choose a Llama or Qwen3 model"
        )
