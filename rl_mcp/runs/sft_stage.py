"""A run's supervised stage (stage `sft`): before run-api, when the environment's config has an `sft`
section and the run has not done it yet (a resumed run's stage is done: it starts from that state).

Its process (`python -m tinker_atropos.sft.stage`) holds the environment and the training backend;
the server only starts it, waits for it, and reads its files. Stopped with the run (SIGTERM: it ends
its step or cancels its evaluation at once, then saves what it trained), and with the server (it
watches the server's pid, named in `TINKER_ATROPOS_OWNER`: forked from the warm template, its parent
is the template, not the server). Its environment's requests go to env_health.json as RL's do, so
the run's status shows them while it lasts.
`then: stop` ends the run after it, completed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_mcp.logs import last_error_line, tail_lines
from rl_mcp.processes import StageError, supervised, wait_exit
from rl_mcp.runs.vocab import Stage
from tinker_atropos.owner import OWNER_VAR, owner_token
from tinker_atropos.run_files import (
    SFT_STAGE,
    ExitCode,
    Outcome,
    RunFiles,
    RunResult,
    exit_meaning,
    finished_sft_state,
    read_json_object,
    read_jsonl,
    read_sft_result,
    stopped_sft,
)

FAILURE_TAIL_LINES = 12
STAGE_LOGGER = "tinker_atropos.sft"  # the stage's process logs under this name
STOP_GRACE_S = 60.0  # a stopped stage ends its step (not its evaluation) and saves the adapter it trained


def sft_section(config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The environment's `sft` section, when set."""
    section = (config.get("env") or {}).get("sft")
    return dict(section) if isinstance(section, Mapping) else None


def with_teacher_key(env: Mapping[str, str], config: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, str]:
    """`env` plus the variable the section's teacher names for its key (a secret the stage's process
    needs and no other does), when the server has it."""
    teacher = (sft_section(config) or {}).get("teacher") or {}
    var = teacher.get("api_key_var") if isinstance(teacher, Mapping) else None
    return {**env, var: environ[var]} if isinstance(var, str) and var in environ else dict(env)


def sft_pending(config: Mapping[str, Any], files: RunFiles) -> bool:
    """The section is set and the stage has not ended (a stopped one goes on in a resumed run)."""
    return sft_section(config) is not None and finished_sft_state(files.run_dir) is None


def sft_command(python: str, config_path: str, env_file: Path) -> list[str]:
    """The stage's command: a module of the product's interpreter, forked from the warm template."""
    return [python, "-m", "tinker_atropos.sft.stage", "--config", config_path, "--env-file", str(env_file)]


def sft_env(env: Mapping[str, str]) -> dict[str, str]:
    """`env` naming this server as the stage's owner: a server killed outright (no exit code of its
    own runs) still ends the stage, which saves what it trained."""
    return {**env, OWNER_VAR: owner_token()}


async def run_sft_stage(argv: list[str], files: RunFiles, env: Mapping[str, str], timeout_s: float) -> None:
    """The stage's process, to its end; StageError when it fails or outlives `timeout_s`."""
    log = files.log(SFT_STAGE)
    deadline = time.monotonic() + timeout_s
    async with supervised("sft", argv, log_path=log, env=env, stop_grace_s=STOP_GRACE_S) as child:
        code = await wait_exit(child, deadline)
    if code is None:
        raise StageError(Stage.SFT, f"the supervised stage took over {timeout_s:.0f} s (log: {log})", None, SFT_STAGE)
    if code != ExitCode.OK:
        why = stage_error(log) or f"see {log}"
        raise StageError(Stage.SFT, f"{exit_meaning(code)} (exit {code}): {why}", code, SFT_STAGE)
    if stopped_sft(files.run_dir) is not None:  # signalled by someone else than the run
        raise StageError(
            Stage.SFT, "the supervised stage was stopped before its end (its state is saved)", 0, SFT_STAGE
        )


def stage_error(log: Path) -> str | None:
    """Why the stage's process failed, in its own words: its last ERROR line, else a traceback's last."""
    lines = tail_lines(log, FAILURE_TAIL_LINES)
    logged = [line.split(f"{STAGE_LOGGER}: ", 1)[1] for line in lines if f" ERROR {STAGE_LOGGER}: " in line]
    return logged[-1].strip() if logged else last_error_line(lines)


def write_sft_only_result(files: RunFiles, backend: str) -> None:
    """`then: stop`: the run ends with the stage, its result the stage's weights and state."""
    done = read_sft_result(files.run_dir) or {}
    RunResult(
        status=Outcome.COMPLETED,
        steps=0,
        final_checkpoint=done.get("sampler_weights"),
        final_state=done.get("state"),
        backend=backend,
    ).write(files.run_dir)


@dataclass(frozen=True)
class SftProgress:
    """The stage as its files tell it: step i of N, the loss, its examples, the held-out evaluations
    before and after it, how it ended (None while it runs)."""

    step: int
    total_steps: int
    loss: float | None
    first_loss: float | None
    examples: int | None
    counts: dict[str, dict[str, int]]
    evals: list[dict[str, Any]]
    ended: str | None


def sft_progress(files: RunFiles) -> SftProgress | None:
    """None for a run without a supervised stage."""
    steps, done = read_jsonl(files.sft_steps), read_sft_result(files.run_dir)
    summary = read_json_object(files.sft_summary) or {}
    if not steps and done is None and not summary:
        return None
    last = steps[-1] if steps else {}
    return SftProgress(
        step=int(last.get("step", 0)),
        total_steps=int(last.get("total_steps", (done or {}).get("total_steps", 0))),
        loss=last.get("loss"),
        first_loss=steps[0].get("loss") if steps else None,
        examples=summary.get("examples"),
        counts=summary.get("counts") or {},
        evals=[e for e in read_jsonl(files.evals) if e.get("stage") == "sft"],
        ended=(done or {}).get("ended"),
    )
