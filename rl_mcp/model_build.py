"""Offline models are built before any process that loads them starts.

A run starts run-api, the trainer and the environment at once, and rl_test_inference starts an
environment (and maybe an inference server): each may load the model folder a config names
(`trainer.base_model`, `env.tokenizer_name`, a server's `tokenizer_name`). On a first run that
folder does not exist yet, so it is built here first, in a supervised child (torch stays out of
the server), and the processes start only once it is complete.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rl_mcp import warm_start
from rl_mcp.errors import UserError
from rl_mcp.logs import last_error_line, tail_lines
from rl_mcp.processes import supervised, wait_exit
from tinker_atropos.models.paths import is_built, offline_model_named  # torch-free by contract

FAILURE_TAIL_LINES = 12


class ModelBuildError(UserError):
    """An offline model could not be built; the message names it and the log's last error."""

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def models_to_build(config: Mapping[str, Any]) -> list[str]:
    """The offline models a run or test config points at that are not built yet, in a stable order."""
    refs = [(config.get("trainer") or {}).get("base_model"), (config.get("env") or {}).get("tokenizer_name")]
    refs += [server.get("tokenizer_name") for server in config.get("openai") or [] if isinstance(server, Mapping)]
    names = (offline_model_named(str(ref)) for ref in refs if ref)
    return [name for name in dict.fromkeys(n for n in names if n) if not is_built(name)]


async def build_models(
    config: Mapping[str, Any], *, python: str, env: Mapping[str, str], log: Path, timeout_s: float
) -> list[str]:
    """Build what `models_to_build(config)` lists, one child each; returns their names.

    Raises ModelBuildError when a build fails or outlives `timeout_s` (the child is stopped)."""
    names = models_to_build(config)
    deadline = time.monotonic() + timeout_s
    if names:  # a first run's or test's: forked from the template starting beside it (~0.2 CPU s, not ~4)
        await warm_start.wait_ready(python, env, min(warm_start.READY_WAIT_S, timeout_s / 2))
    for name in names:
        argv = [python, "-m", "tinker_atropos.models", "ensure", name]
        async with supervised("model build", argv, log_path=log, env=env, stop_grace_s=3.0) as child:
            code = await wait_exit(child, deadline)
        if code is None:
            raise ModelBuildError(f"building the offline model {name!r} took over {timeout_s:.0f} s (log: {log})")
        if code != 0:
            why = last_error_line(tail_lines(log, FAILURE_TAIL_LINES)) or f"see {log}"
            raise ModelBuildError(f"building the offline model {name!r} failed (exit {code}): {why}", code)
    return names
