"""One episode of the real hermes-agent: `hermes -t TOOLSETS -z PROMPT` run in the rollout's sandbox
(bwrap: the system read-only, the rollout's directory its working directory and home, every tool it
runs inside the same container), against the run's inference server under the episode's own key.

Its HERMES_HOME lives in the sandbox's folder, beside the workdir: the sandbox's end removes it, and a
sandbox whose process was killed is swept with it by the next one. Hermes prints the final answer on
stdout; its log goes to a file in that home, whose tail an episode that failed keeps.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_atropos.agent.sandboxes.local import LocalSandbox
from tinker_atropos.hermes_harness.hermes_config import write_home

KEY_PREFIX = "episode-"  # the inference server records the requests of a key with it (episode_log.py)
STDERR_FILE = "hermes.stderr"
STDERR_TAIL = 2000
# `hermes -z` exits 0 when it could not reach its model, its answer saying so (0.19.0)
API_FAILED = "API call failed"
# Hermes' stderr kept apart from its answer on stdout (the sandbox merges a command's two streams)
SPLIT_STDERR = 'exec "$@" 2>"$HERMES_HOME/' + STDERR_FILE + '"'


def episode_key() -> str:
    return KEY_PREFIX + secrets.token_hex(12)


@dataclass(frozen=True)
class HermesRun:
    """How every episode of a run starts Hermes."""

    hermes: Path  # the `hermes` script of the hermes runtime
    toolsets: tuple[str, ...]
    timeout_s: float


@dataclass(frozen=True)
class Episode:
    key: str
    exit_code: int | None  # None: killed (its time limit, a flood of output)
    answer: str  # Hermes' final answer (stdout)
    stderr_tail: str
    seconds: float
    timed_out: bool

    @property
    def failed(self) -> bool:
        return self.exit_code != 0 or self.answer.startswith(API_FAILED)


async def run_episode(sandbox: LocalSandbox, run: HermesRun, prompt: str, config: dict[str, Any], key: str) -> Episode:
    """Hermes on `prompt` in `sandbox` with `config` (hermes_config.episode_config), cut at the time limit."""
    home = write_home(sandbox.root / "hermes-home", config)
    argv = ["sh", "-c", SPLIT_STDERR, "sh", str(run.hermes), "-t", ",".join(run.toolsets), "-z", prompt]
    env = {"HERMES_HOME": str(home), "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    started = time.monotonic()
    done = await sandbox.run_program(argv, env, run.timeout_s, writable=(home,))
    try:
        said = (home / STDERR_FILE).read_text(errors="replace")
    except OSError:
        said = ""
    return Episode(
        key=key,
        exit_code=done.exit_code,
        answer=done.output.strip(),
        stderr_tail=said[-STDERR_TAIL:],
        seconds=round(time.monotonic() - started, 3),
        timed_out=done.timed_out,
    )
