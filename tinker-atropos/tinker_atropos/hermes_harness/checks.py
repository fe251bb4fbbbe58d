"""An episode's score, in its own sandbox after Hermes ended: the item's shell check (a non-zero exit
scores 0; exit 0 scores the number its last line prints, clamped to 0..1, else 1) or the folder's
`score(item, episode, sandbox)`. An episode cut at its time limit scores 0 whatever it left behind."""

from __future__ import annotations

import importlib.util
import inspect
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tinker_atropos.agent.sandboxes.base import Sandbox
from tinker_atropos.hermes_harness.episode import Episode
from tinker_atropos.hermes_harness.task_set import SCORE_FILE, HermesTask

logger = logging.getLogger(__name__)
CHECK_TIMEOUT_S = 60.0
Scorer = Callable[[HermesTask, Episode, Sandbox], Any]


def load_scorer(folder: Path) -> Scorer | None:
    """The folder's `score` function, where it has a score.py (imported here: the environment's code)."""
    path = folder / SCORE_FILE
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"hermes_tasks_score_{abs(hash(folder))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    scorer = getattr(module, "score", None)
    if not callable(scorer):
        raise ValueError(f"{path} defines no score(item, episode, sandbox) function")
    return scorer


def printed_score(output: str) -> float | None:
    """The number a check printed last, if its last line is one."""
    lines = [line.strip() for line in output.strip().splitlines() if line.strip()]
    try:
        return min(1.0, max(0.0, float(lines[-1]))) if lines else None
    except ValueError:
        return None


async def score_episode(item: HermesTask, episode: Episode, sandbox: Sandbox, scorer: Scorer | None) -> float:
    if episode.timed_out:
        return 0.0
    if item.check is None:
        assert scorer is not None  # read_task_set refuses an item with neither
        said = scorer(item, episode, sandbox)
        return float(await said if inspect.isawaitable(said) else said)
    done = await sandbox.run(item.check, timeout_s=CHECK_TIMEOUT_S)
    if done.exit_code != 0:
        return 0.0
    number = printed_score(done.output)
    return 1.0 if number is None else number
