"""The facts the diagnosis rules read, gathered from a run's record and files."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from rl_mcp.diagnosis.facts import RunFacts
from rl_mcp.logs import tail_lines
from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from rl_mcp.runs.env_health import read_health
from rl_mcp.runs.item_counts import read_items
from rl_mcp.runs.metrics import MetricsCache
from rl_mcp.runs.store import RunRecord
from tinker_atropos.run_files import ProcessName, read_json_object, read_jsonl

# atroposlib's warning when it drops a group whose scores are all equal (no learning signal).
EQUAL_SCORES_MARK = "Scores are the same in a group"
ENV_LOG_LINES = 50


def run_config_sections(config_path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run config's env and trainer sections ({} where the file is missing or unreadable)."""
    try:
        data = read_run_config(config_path)
    except RUN_CONFIG_ERRORS:
        return {}, {}
    env, trainer = data.get("env"), data.get("trainer")
    return (env if isinstance(env, dict) else {}), (trainer if isinstance(trainer, dict) else {})


def drops_equal_groups(env_log_tail: list[str]) -> bool:
    """The environment's latest log lines show atroposlib dropping groups whose replies all scored the same."""
    return any(EQUAL_SCORES_MARK in line for line in env_log_tail)


def latest_replies(path: Path) -> tuple[int | None, list[tuple[float, str]]]:
    """The trainer's latest_replies.json: its step and (score, reply) pairs (none where unreadable)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return int(data["step"]), [(float(r["score"]), str(r["reply"])) for r in data["replies"]]
    except (OSError, ValueError, TypeError, KeyError):
        return None, []


def run_facts(rec: RunRecord, cache: MetricsCache, now: float | None = None) -> RunFacts:
    metrics = cache.metrics(rec)
    env, trainer = run_config_sections(rec.config_path)
    drops = rec.active and drops_equal_groups(tail_lines(rec.log_path(ProcessName.ENV), ENV_LOG_LINES))
    replies_step, replies = latest_replies(rec.files.latest_replies)
    health = read_health(rec.files.env_health)
    return RunFacts(
        run_id=rec.run_id,
        metrics=metrics,
        evals=cache.evals(rec),
        validation=cache.validation(rec),
        env=env,
        trainer=trainer,
        active=rec.active,
        now=time.time() if now is None else now,
        running_since=rec.running_at,
        env_drops_equal_groups=drops,
        replies_step=replies_step,
        replies=replies,
        discards=health.discards if health else None,
        requests=health.requests if health else None,
        sft_steps=read_jsonl(rec.files.sft_steps),
        groups_scored=health.groups if health else None,
        items=read_items(rec.files.items),
        teacher=read_json_object(rec.files.teacher),
    )
