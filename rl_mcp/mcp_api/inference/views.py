"""The rl_test_inference answer, built from the runner's per-model outcomes."""

from __future__ import annotations

from rl_mcp.inference.run_weights import RunCheckpoint
from rl_mcp.inference.runner import ModelOutcome
from rl_mcp.inference.target import InferenceRequest, Target
from rl_mcp.mcp_api.env_health.views import at_cap_view, discarded_view
from rl_mcp.mcp_api.from_domain import answer_from
from rl_mcp.mcp_api.inference import descriptions
from rl_mcp.mcp_api.inference.answers import InferenceTestResult, ModelInferenceResult, RunComparison
from tinker_atropos.run_files import InferenceTestFiles


def inference_answer(
    req: InferenceRequest,
    target: Target,
    outcomes: list[ModelOutcome],
    run: tuple[str, RunCheckpoint] | None = None,
) -> InferenceTestResult:
    """`run` (run id, checkpoint): the target is that run's base model, then its trained weights."""
    results = [_model_result(o) for o in outcomes]
    ran = [r for r in results if r.status == "ok"]
    best = max(ran, key=lambda r: (r.accuracy, r.mean_score), default=None)
    working = bool(ran)
    if working and all(r.tool_calls_per_rollout == 0 for r in ran):
        next_step = descriptions.NEXT_INFERENCE_NO_TOOL_CALLS
    elif working:
        next_step = descriptions.NEXT_INFERENCE_WORKING
    elif any(r.status == "discarded" for r in results):
        next_step = descriptions.NEXT_INFERENCE_DISCARDED
    else:
        next_step = descriptions.NEXT_INFERENCE_BROKEN
    return answer_from(
        InferenceTestResult,
        req,  # its steps and group size
        target,  # its URL and key variable
        environment=req.env_name,
        target=target.kind,
        results=results,
        best_model=best.model if best else None,
        mean_accuracy=round(sum(r.accuracy for r in ran) / len(ran), 4) if ran else None,
        environment_working=working,
        run_comparison=_comparison(run, target, results) if run else None,
        output_dir=str(req.out_dir),
        next_step=next_step,
    )


# What a model that scored nothing answers (it failed, timed out or had every group discarded).
UNSCORED = {
    "steps_tested": 0,
    "completions": 0,
    "correct": 0,
    "accuracy": 0.0,
    "step_success_rate": 0.0,
    "mean_score": 0.0,
    "step_scores": [],
    "real_logprobs": False,
    "samples": [],
}


def _model_result(o: ModelOutcome) -> ModelInferenceResult:
    """The outcome's, its scores' and its agent counts' fields by name; rounded, and paths as text."""
    s = o.scores
    agent = s.agent if s else None
    scored = (
        {
            "accuracy": round(s.accuracy, 4),
            "step_success_rate": round(s.step_success_rate, 4),
            "mean_score": round(s.mean_score, 4),
            "real_logprobs": s.has_logprobs,
        }
        if s
        else UNSCORED
    )
    return answer_from(
        ModelInferenceResult,
        o,
        s,
        agent,
        **scored,
        reward_reasons=agent.reasons if agent and agent.reasons else None,
        output_jsonl=str(o.jsonl) if o.jsonl else None,
        output_html=str(o.html) if o.html else None,
        log=str(o.log),
        server_log=str(o.server_log) if o.server_log else None,
        config=str(InferenceTestFiles(o.output_dir).config),
        discarded=discarded_view(o.health.discards if o.health else None),
        replies_at_cap=at_cap_view(o.at_cap, o.health.requests if o.health else None),
    )


def _comparison(run: tuple[str, RunCheckpoint], target: Target, results: list[ModelInferenceResult]) -> RunComparison:
    run_id, checkpoint = run
    base, trained = (next(r for r in results if r.model == m) for m in target.models)

    def ran(r: ModelInferenceResult, value: float) -> float | None:
        return value if r.status == "ok" else None

    base_acc, trained_acc = ran(base, base.accuracy), ran(trained, trained.accuracy)
    return RunComparison(
        run_id=run_id,
        checkpoint=checkpoint.name,
        checkpoint_step=checkpoint.step,
        weights=checkpoint.path,
        base_model=target.local_weights(trained.model).base_model,
        base_accuracy=base_acc,
        trained_accuracy=trained_acc,
        accuracy_delta=None if base_acc is None or trained_acc is None else round(trained_acc - base_acc, 4),
        base_mean_score=ran(base, base.mean_score),
        trained_mean_score=ran(trained, trained.mean_score),
    )
