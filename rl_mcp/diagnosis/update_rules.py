"""The rules on the size of the updates: gradients that are not finite or spike, and rollouts whose
sampler drifted from the trained policy.

A spike or a drift that passed is reported too (severity `info`): a run that blew up for a few
steps and then settled, or collapsed, looks quiet at its end, and its next run needs the same fix.
"""

from __future__ import annotations

import math
import statistics

from rl_mcp.diagnosis import thresholds as t
from rl_mcp.diagnosis.facts import RunFacts, episode, evidence_of, mean_of, span_of, window
from rl_mcp.diagnosis.findings import Finding, Severity
from rl_mcp.diagnosis.next_steps import edit, lower_learning_rate
from rl_mcp.runs.metrics import Points, series


def _not_finite(facts: RunFacts) -> Finding | None:
    bad = [(key, p) for key in ("loss", "grad_norm") for p in series(facts.metrics, key) if not math.isfinite(p[1])]
    if not bad:
        return None
    key, head = bad[0]
    points = [p for k, p in bad if k == key]
    return Finding(
        "loss_unstable",
        "error",
        f"{key} is not finite (first at step {head[0]})",
        lower_learning_rate(facts, "non-finite updates: cut the learning rate"),
        [evidence_of(key, points, f"{key} {head[1]} at steps {', '.join(str(s) for s, _ in points[:10])}")],
    )


def _spikes(norms: Points) -> list[tuple[int, float, float]]:
    """(step, norm, norm / the median of the steps before it) from the first step with a window before it."""
    out = []
    for i in range(t.MIN_WINDOW_STEPS, len(norms)):
        base = statistics.median(v for _, v in norms[:i])
        if base > 0:
            out.append((*norms[i], norms[i][1] / base))
    return out


def loss_unstable(facts: RunFacts) -> Finding | None:
    """A loss or gradient norm that is not finite, a gradient norm exploding now, or one that spiked."""
    if (finding := _not_finite(facts)) is not None:
        return finding
    norms = series(facts.metrics, "grad_norm")
    spikes = _spikes(norms)
    if not spikes:
        return None
    latest_from = norms[-window(norms)][0]
    latest = max((s for s in spikes if s[0] >= latest_from), key=lambda s: s[2], default=None)
    severity: Severity
    if latest is not None and latest[2] >= t.GRAD_NORM_EXPLOSION:
        step, value, ratio = latest
        severity, verb, since = "warning", "spiking", ""
    else:
        step, value, ratio = max(spikes, key=lambda s: s[2])
        if ratio < t.GRAD_NORM_SPIKE:
            return None
        severity, verb = "info", "spiked"
        since = f"; {norms[-1][1]:.3g} at step {norms[-1][0]}" if step < latest_from else ""
    base = value / ratio
    return Finding(
        "loss_unstable",
        severity,
        f"Gradient norm {verb}: {value:.3g} at step {step}, {ratio:.0f}x its median before{since}",
        lower_learning_rate(facts, "gradient spikes: cut the learning rate"),
        [evidence_of("grad_norm", norms, f"median {base:.3g} before step {step}, {value:.3g} at it{since}")],
    )


def off_policy_drift(facts: RunFacts) -> Finding | None:
    """The sampler's logprobs far from the trainer's (importance ratios far from 1), now or in an
    episode that passed."""
    drift = series(facts.metrics, "logprob_drift")
    if not drift:
        return None
    recent = drift[-window(drift) :]
    lasting = mean_of(recent) > t.DRIFT_WARN
    high = recent if lasting else episode(drift, t.DRIFT_WARN)
    if not high:
        return None
    mean = mean_of(high)
    ratio = math.exp(mean)
    if facts.trainer.get("loss_fn") == "importance_sampling":
        why = "ppo clips the importance ratio, so stale rollouts cannot push the update far"
        next_step = edit("loss_fn", "ppo", why)
    else:
        next_step = lower_learning_rate(facts, "smaller updates keep the sampler close to the trained policy")
    peak = max(high, key=lambda p: p[1])
    summary = f"mean |trainer - sampler logprob| {mean:.3f} per token over {span_of(high)}"
    evidence = [evidence_of("logprob_drift", high, f"{summary}, {peak[1]:.3g} at step {peak[0]}")]
    ratios = f"typical importance ratio {ratio:.3g} or {1 / ratio:.3g}"
    if lasting:
        title = f"The sampler's logprobs drift from the trainer's ({ratios})"
    else:
        title = f"The sampler's logprobs drifted from the trainer's over {span_of(high)} ({ratios}), since settled"
        evidence.append(evidence_of("logprob_drift", recent, f"since: {mean_of(recent):.3g} over {span_of(recent)}"))
    return Finding("off_policy_drift", "warning" if lasting else "info", title, next_step, evidence)
