"""What the run tools and resources answer, built from a run's record and its files, and the next step
each answer suggests."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rl_mcp.diagnosis import findings as diagnosis
from rl_mcp.diagnosis.answers import findings_view
from rl_mcp.diagnosis.inputs import run_config_sections, run_facts
from rl_mcp.diagnosis.rules import diagnose
from rl_mcp.from_domain import answer_from
from rl_mcp.logs import tail_lines
from rl_mcp.processes import Child
from rl_mcp.runs import vocab
from rl_mcp.runs.answers import (
    CheckpointChoiceView,
    HistoryPoint,
    LatestMetrics,
    Lineage,
    RolloutError,
    RunList,
    RunProcess,
    RunResults,
    RunStarted,
    RunStatus,
    RunStopped,
    RunSummary,
    SftEval,
    SftStage,
    TrainingStateView,
)
from rl_mcp.runs.checkpoint_choice import CheckpointChoice, checkpoint_choice
from rl_mcp.runs.config_file import RUN_CONFIG_ERRORS, read_run_config
from rl_mcp.runs.env_health import EnvError, read_health
from rl_mcp.runs.health_answers import items_view, requests_view
from rl_mcp.runs.item_counts import read_items
from rl_mcp.runs.metrics import (
    MetricsCache,
    downsample,
    eta_seconds,
    eval_summary,
    latest_metrics,
    wandb_url_from_log,
)
from rl_mcp.runs.sft_stage import sft_progress
from rl_mcp.runs.store import RunRecord
from rl_mcp.settings import Settings
from tinker_atropos.best_checkpoint import weights_path
from tinker_atropos.run_files import (
    SFT_STAGE,
    ProcessName,
    read_checkpoints,
    read_result,
    read_training_states,
)

STATUS_LOG_LINES = 8
MAX_HISTORY_POINTS = 200


def lineage(rec: RunRecord) -> Lineage | None:
    if rec.resumed_from is None:
        return None
    return Lineage(parent_run_id=rec.resumed_from, step=rec.resumed_step or 0, kind="fork" if rec.forked else "resume")


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def processes_view(rec: RunRecord, children: dict[str, Child]) -> list[RunProcess]:
    out = []
    for name, proc in rec.processes.items():
        child = children.get(name)
        code = proc.exit_code if proc.exit_code is not None else (child.poll() if child else None)
        state = "running" if code is None and proc.exit_code is None else "exited"
        out.append(
            answer_from(RunProcess, proc, name=ProcessName(name), state=state, exit_code=code, log=proc.log_path)
        )
    return out


def summary(rec: RunRecord, cache: MetricsCache) -> RunSummary:
    return answer_from(
        RunSummary,
        rec,
        step=_step(cache.metrics(rec)),
        created_at=_iso(rec.created_at) or "",
        ended_at=_iso(rec.ended_at),
        resumed_from=lineage(rec),
    )


def _trainer_section(rec: RunRecord) -> dict[str, Any]:
    try:
        return dict(read_run_config(rec.config_path).get("trainer") or {})
    except RUN_CONFIG_ERRORS:
        return {}


def wandb_project_logged(rec: RunRecord) -> str | None:
    """The W&B project the run logs to, if it logs to one (then rl_get_results asks W&B for its summary)."""
    trainer = _trainer_section(rec)
    project = trainer.get("wandb_project")
    return str(project) if trainer.get("use_wandb") and project else None


def wandb_identity(rec: RunRecord) -> tuple[str | None, str | None]:
    """The run's W&B project and run name, from its config (the names Hermes' RL tool answers with)."""
    trainer = _trainer_section(rec)
    project = trainer.get("wandb_project")
    return str(project) if project else None, str(trainer.get("run_name") or rec.run_name or "") or None


def started(rec: RunRecord) -> RunStarted:
    project, wandb_run = wandb_identity(rec)
    return answer_from(
        RunStarted,
        rec,
        wandb_project=project,
        wandb_run_name=wandb_run,
        logs={name: str(rec.log_path(name)) for name in ProcessName},
        ports={"api": rec.api_port, "inference": rec.inference_port},
        resumed_from=lineage(rec),
        next_step=next_after_start(rec.run_id, rec.active),
    )


def _latest(
    metrics: list[dict[str, Any]], evals: list[dict[str, Any]], validation: list[dict[str, Any]]
) -> LatestMetrics | None:
    if not metrics and not evals:
        return None
    return LatestMetrics.model_validate(
        {**latest_metrics(metrics, evals, validation), "step": _step(metrics) if metrics else None}
    )


def sft_view(rec: RunRecord) -> SftStage | None:
    facts = sft_progress(rec.files)
    if facts is None:
        return None
    evals = [SftEval.model_validate({**e, "sft_step": int(e.get("sft_step") or 0)}) for e in facts.evals]
    return answer_from(SftStage, facts, evals=evals)


def _sft_log(rec: RunRecord) -> list[str]:
    """The supervised stage's log, where the run has one (it runs before the three processes)."""
    return [SFT_STAGE] if rec.files.log(SFT_STAGE).exists() else []


def _step(metrics: list[dict[str, Any]]) -> int:
    return int(metrics[-1].get("step", len(metrics))) if metrics else 0


def status(rec: RunRecord, children: dict[str, Child], cache: MetricsCache, settings: Settings) -> RunStatus:
    min_interval_s = settings.status_min_interval_s
    metrics, evals = cache.metrics(rec), cache.evals(rec)
    result = read_result(Path(rec.run_dir)) or {}
    end = rec.ended_at or time.time()
    # never negative: the wall clock can jump back between two recorded times (NTP, a VM restored)
    running_s = round(max(end - rec.running_at, 0.0), 1) if rec.running_at else None
    health = read_health(rec.files.env_health)
    env_error = health.error if health else None
    requests = requests_view(health.requests, *run_config_sections(rec.config_path), time.time()) if health else None
    found = diagnose(run_facts(rec, cache))
    top = found[0] if found and found[0].rank >= diagnosis.SEVERITY_RANK["warning"] else None
    if rec.active and env_error is not None and env_error.at > (env_error.last_group_at or 0.0):
        hint = next_status_env_raising(env_error.line, env_error.errors, settings.env_limits.error_timeout_s)
    elif rec.active and requests is not None and requests.timeouts_summary:
        hint = next_status_requests(requests.timeouts_summary)
    elif rec.active and top is not None:
        hint = next_status_finding(top.title, top.next_step.call, top.next_step.why)
    elif rec.active:
        hint = next_status_running(rec.run_id, min_interval_s)
    else:
        hint = next_status_ended(rec.run_id, rec.status, result.get("reason"))
    project, wandb_run = wandb_identity(rec)
    return answer_from(
        RunStatus,
        rec,
        wandb_project=project,
        wandb_run_name=wandb_run,
        rate_limited=False,
        next_check_in_seconds=min_interval_s if rec.active else 0.0,
        failure_log_tail=rec.log_tail,
        step=_step(metrics),
        running_seconds=running_s,
        eta_seconds=eta_seconds(metrics, rec.total_steps, _budget_minutes(rec)) if rec.active else None,
        latest=_latest(metrics, evals, cache.validation(rec)),
        sft=sft_view(rec),
        processes=processes_view(rec, children),
        environment_error=_env_error_view(env_error),
        environment_requests=requests,
        items=items_view(read_items(rec.files.items)),
        findings=findings_view(found),
        logs={name: tail_lines(rec.log_path(name), STATUS_LOG_LINES) for name in [*_sft_log(rec), *rec.processes]},
        wandb_url=result.get("wandb_url") or wandb_url_from_log(rec.log_path(ProcessName.TRAINER)),
        next_step=hint,
    )


def _env_error_view(error: EnvError | None) -> RolloutError | None:
    if error is None:
        return None
    return answer_from(RolloutError, error, at=_iso(error.at) or "")


def rate_limited(rec: RunRecord, wait_s: float) -> RunStatus:
    return RunStatus(
        run_id=rec.run_id,
        environment=rec.environment,
        rate_limited=True,
        next_check_in_seconds=round(wait_s, 1),
        status=rec.status,
        next_step=next_rate_limited(rec.run_id, wait_s),
    )


def results(rec: RunRecord, cache: MetricsCache, wandb: dict[str, Any] | None) -> RunResults:
    run_dir = Path(rec.run_dir)
    metrics, evals, validation = cache.metrics(rec), cache.evals(rec), cache.validation(rec)
    result = read_result(run_dir) or {}
    checkpoints = read_checkpoints(run_dir, rec.run_name)
    choice = checkpoint_choice(validation, evals, keep_best=_keeps_best(rec))
    final = result.get("final_checkpoint") or (metrics[-1].get("checkpoint") if metrics else None)
    if choice is not None and choice.handed_out == "best" and choice.best is not None:
        final = result.get("best_checkpoint") or weights_path(choice.best.weights, checkpoints) or final
    exists = Path(final).is_dir() if final and not str(final).startswith("tinker://") else None
    offline = rec.files.wandb_dir
    history = [
        HistoryPoint.model_validate({**m, "step": int(m.get("step", i + 1))})
        for i, m in enumerate(downsample(metrics, MAX_HISTORY_POINTS))
    ]
    missing = (
        None
        if run_dir.is_dir()
        else (
            f"run folder {run_dir} is missing (deleted or moved): its metrics, checkpoints and weights are "
            "gone; the registry keeps only the run's record"
        )
    )
    hint = next_after_results(missing=bool(missing), active=rec.active, final_weights=final)
    project, wandb_run = wandb_identity(rec)
    return answer_from(
        RunResults,
        rec,
        wandb_project=project,
        wandb_run_name=wandb_run,
        backend=result.get("backend"),
        steps_completed=_step(metrics),
        final_metrics=_latest(metrics, evals, validation),
        sft=sft_view(rec),
        history=history,
        history_total_steps=len(metrics),
        evals=evals[-MAX_HISTORY_POINTS:],
        eval_summary=ev.text if (ev := eval_summary(evals)) else None,
        validation=validation[-MAX_HISTORY_POINTS:],
        checkpoint_choice=_choice_view(choice),
        checkpoints=checkpoints[-MAX_HISTORY_POINTS:],
        final_weights=final,
        final_weights_exists=exists,
        final_state=result.get("final_state"),
        training_states=[answer_from(TrainingStateView, s) for s in read_training_states(run_dir)],
        resumed_from=lineage(rec),
        wandb_url=(wandb or {}).get("url")
        or result.get("wandb_url")
        or wandb_url_from_log(rec.log_path(ProcessName.TRAINER)),
        wandb=wandb,
        wandb_offline_dir=str(offline) if offline.is_dir() else None,
        findings=findings_view(diagnose(run_facts(rec, cache))),
        items=items_view(read_items(rec.files.items)),
        error=missing or rec.error or result.get("error"),
        reason=result.get("reason"),
        next_step=hint,
    )


def _budget_minutes(rec: RunRecord) -> float | None:
    minutes = _trainer_section(rec).get("max_training_minutes")
    return float(minutes) if isinstance(minutes, int | float) else None


def _keeps_best(rec: RunRecord) -> bool:
    return bool(_trainer_section(rec).get("keep_best", True))


def _choice_view(choice: CheckpointChoice | None) -> CheckpointChoiceView | None:
    if choice is None:
        return None
    return answer_from(CheckpointChoiceView, choice, summary=choice.text)  # its best and last alike


def metrics_document(rec: RunRecord, cache: MetricsCache) -> dict[str, Any]:
    """rl://runs/{id}/metrics: the downsampled history and evals, as JSON."""
    metrics = cache.metrics(rec)
    return {
        "run_id": rec.run_id,
        "status": rec.status,
        "total_steps": rec.total_steps,
        "steps": len(metrics),
        "history": downsample(metrics, MAX_HISTORY_POINTS),
        "evals": cache.evals(rec)[-MAX_HISTORY_POINTS:],
        "validation": cache.validation(rec)[-MAX_HISTORY_POINTS:],
    }


NEXT_AFTER_RUN_LIST = "rl_check_status(run_id) or rl_get_results(run_id) for one of these."


def next_after_start(run_id: str, active: bool) -> str:
    if not active:
        return "The start failed: read the error, fix the cause, and call rl_start_training again."
    return (
        f"The run starts in the background. Call rl_check_status('{run_id}') once to see it "
        "reach 'running' (checks of one run are rate-limited), or read rl://runs/"
        f"{run_id}/logs/trainer; rl_stop_training stops it."
    )


def next_status_env_raising(line: str, errors: int, timeout_s: float) -> str:
    return (
        f"The environment's rollouts raise ({errors} so far; the latest: {line}). A rollout that raises "
        "is retried on the next item and scores nothing; if no group is scored for "
        f"{timeout_s:.0f} s the run fails with this error. Fix the environment (see environment_error "
        "and logs/env.log) and check it with rl_test_inference."
    )


def next_status_requests(summary: str) -> str:
    return (
        f"The environment's model requests outlive their timeout: {summary}. Until replies fit the timeout "
        "the run waits for rollouts; see environment_requests, and rl_edit_config the field named for the next run."
    )


def next_status_finding(title: str, call: str, why: str) -> str:
    return (
        f"Training is under way, but: {title}. Next: {call}: {why}. `findings` has the evidence; "
        "rl_stop_training stops this run if it should not go on."
    )


def next_status_running(run_id: str, interval_s: float) -> str:
    return (
        f"Training is under way. Check again in {interval_s:.0f} s or later; meanwhile the "
        f"resources rl://runs/{run_id}/metrics and .../logs/trainer can be read or subscribed to."
    )


def next_status_ended(run_id: str, status: str, reason: str | None = None) -> str:
    if status == "completed":
        early = f"Completed before total_steps: {reason}. " if reason else ""
        return f"{early}Done. Call rl_get_results('{run_id}') for metrics, curves and the weights path."
    return f"The run is {status}. rl_get_results('{run_id}') shows what it produced."


def next_rate_limited(run_id: str, wait_s: float) -> str:
    return (
        f"Checked too recently: nothing was checked. Wait {wait_s:.0f} s before calling "
        f"rl_check_status('{run_id}') again (training is slow; frequent checks cost tokens)."
    )


def stopped(rec: RunRecord, was: vocab.RunStatus) -> RunStopped:
    """A stopped run (`was`: its status before the stop), its processes as they exited."""
    message = (
        f"run {rec.run_id} stopped; nothing of it is running"
        if was.active
        else f"run {rec.run_id} had already ended ({was}); nothing to stop"
    )
    return answer_from(RunStopped, rec, was=was, processes=processes_view(rec, {}), message=message)


def run_list(runs: list[RunRecord], cache: MetricsCache) -> RunList:
    return RunList(runs=[summary(r, cache) for r in runs], next_step=NEXT_AFTER_RUN_LIST)


def next_after_results(*, missing: bool, active: bool, final_weights: str | None) -> str:
    if missing:
        return "Start a new run with rl_start_training; other runs are unaffected."
    if active:
        return "The run is still going: these are partial results. rl_check_status shows progress."
    if final_weights:
        return (
            f"The final weights are at {final_weights}. Test them with rl_test_inference(run_id=...), take the "
            "model out with rl_export_model(run_id=..., format='adapter' | 'merged' | 'gguf'), or start another run."
        )
    return "No weights were saved. rl_check_status shows why the run ended."
