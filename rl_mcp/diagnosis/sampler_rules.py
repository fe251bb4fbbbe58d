"""The rule on vLLM's sampler against the trainer (`trainer.sampler: vllm`): their logprobs of the same
tokens under the same weights (`sampler_mismatch`) growing apart over the run.

A steady mismatch is bfloat16 kernels against the trainer's (0.005 nats a token on tiny-chat); one that
grows is a sampler whose weights or kernels no longer match the trained policy (an adapter loaded
wrong, a precision change), and its importance ratios carry the error into every update.
"""

from __future__ import annotations

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts, mean_of, span_of, window, window_means
from rl_mcp.diagnosis.findings import Finding
from rl_mcp.diagnosis.next_steps import edit, lower_learning_rate
from rl_mcp.runs.metrics import series


def sampler_mismatch_grows(facts: RunFacts) -> Finding | None:
    points = series(facts.metrics, "sampler_mismatch")
    if len(points) < t.MIN_TREND_STEPS:
        return None
    size = window(points)
    first, recent = points[:size], points[-size:]
    before, now = mean_of(first), mean_of(recent)
    if now < t.MISMATCH_WARN or now < t.MISMATCH_GROWTH * before:
        return None
    if facts.trainer.get("loss_fn") != "cispo":
        why = (
            "cispo weighs each token by its importance ratio clipped at clip_high (truncated importance sampling): "
            "tokens on which vLLM and the trainer disagree cannot push the update far"
        )
        next_step = edit("loss_fn", "cispo", why)
    else:
        next_step = lower_learning_rate(facts, "smaller updates while the sampler's logprobs are off")
    title = (
        f"vLLM's logprobs grow apart from the trainer's on the same weights: {now:.3f} nats a token over "
        f"{span_of(recent)}, {before:.3f} over {span_of(first)}"
    )
    return Finding("sampler_mismatch", "warning", title, next_step, window_means("sampler_mismatch", first, recent))
