"""What each answer tells the agent to do next."""

from __future__ import annotations

NEXT_AFTER_LIST = "rl_select_environment(name) with one of these names."
NEXT_AFTER_CONFIG = (
    "rl_edit_config(field, value) for any editable field, then rl_test_inference to check the "
    "environment against real inference, then rl_start_training."
)
NEXT_AFTER_EDIT = "rl_get_current_config to review, or rl_test_inference / rl_start_training when ready."
NEXT_AFTER_RUN_LIST = "rl_check_status(run_id) or rl_get_results(run_id) for one of these."
NEXT_INFERENCE_WORKING = (
    "The environment works: rl_start_training to train on it. Read samples / output_html "
    "to check the rewards make sense; all-equal scores in a group give no learning signal."
)
NEXT_INFERENCE_DISCARDED = (
    "The environment discarded every group: its rollouts returned no group and raised nothing, so a "
    "run would never get a batch. Read each model's `discarded` (sample replies, scores, the likely "
    "cause): equal scores call for more varied replies (a higher temperature, a larger group_size) or "
    "items the model sometimes gets right; replies too short or unparsable call for a fix in the "
    "environment or its prompt. Then rl_test_inference again."
)
NEXT_INFERENCE_BROKEN = (
    "Nothing ran end to end: read each model's error and log_tail, fix the environment "
    "(rl://environments/{name} shows its source) or the endpoint, then call rl_test_inference again."
)


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


def next_status_ended(run_id: str, status: str) -> str:
    if status == "completed":
        return f"Done. Call rl_get_results('{run_id}') for metrics, curves and the weights path."
    return f"The run is {status}. rl_get_results('{run_id}') shows what it produced."


def next_rate_limited(run_id: str, wait_s: float) -> str:
    return (
        f"Checked too recently: nothing was checked. Wait {wait_s:.0f} s before calling "
        f"rl_check_status('{run_id}') again (training is slow; frequent checks cost tokens)."
    )


def stop_message(run_id: str, was: str, was_active: bool) -> str:
    if was_active:
        return f"run {run_id} stopped; nothing of it is running"
    return f"run {run_id} had already ended ({was}); nothing to stop"


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


def next_after_export(fmt: str, hub_url: str | None) -> str:
    pushed = f" It is on the Hub at {hub_url}." if hub_url else ""
    other = {
        "adapter": "'merged' or 'gguf'",
        "merged": "'gguf' (Ollama, llama.cpp)",
        "gguf": "'merged' (transformers)",
    }[fmt]
    return (
        f"Load it with load_command; README.md in the folder is its model card.{pushed} Export format={other} for "
        "other programs, or hub_repo='you/name' (needs HF_TOKEN) to publish it."
    )


def next_after_compare(best_by_eval: str | None, best_by_rate: str | None) -> str:
    best = best_by_eval or best_by_rate
    if best is None:
        return "No run has a reward or an evaluation yet: compare again once they have trained a few steps."
    return (
        f"rl_export_model('{best}') takes the best run's model out; rl_start_training(resume_from='{best}', "
        "fork=true) continues it with the session's current config; rl_get_results(run_id) shows one run in full."
    )
