"""Scores from the JSONL that an atroposlib environment's `process` mode writes.

One line per scored group (a ScoredDataGroup: `tokens`, `masks`, `scores`, `messages`, ...).
The writer buffers, so a file being written may end in a half line: only lines that end in a
newline count. Samples come from `messages` (process mode always fills them, decoding the tokens
itself when the environment gave none), so the server never needs a tokenizer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tinker_atropos.agent.trajectory import format_trajectory
from tinker_atropos.run_files import read_jsonl

SAMPLE_CHARS = 400
TRAJECTORY_LIMITS = {"system": 200, "user": 600, "assistant": 600, "args": 200, "tool": 400}
_ASSISTANT_MARKERS = (
    "<|im_start|>assistant\n",
    "<|start_header_id|>assistant<|end_header_id|>",
    "<|assistant|>",
    "[/INST]",
)
_END_MARKERS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "</s>", "<|end|>")


@dataclass(frozen=True)
class Sample:
    """One completion shown to the agent: what was asked, what came back, what it scored."""

    step: int
    score: float
    prompt: str
    completion: str


@dataclass(frozen=True)
class ScoreSummary:
    steps_tested: int
    completions: int
    correct: int
    accuracy: float
    step_success_rate: float
    mean_score: float
    step_scores: list[list[float]]
    has_logprobs: bool
    samples: list[Sample]
    agent: AgentStats | None = None


@dataclass(frozen=True)
class AgentStats:
    """For agent environments (each completion's overrides report its turns and tool calls)."""

    turns_per_rollout: float
    tool_calls_per_rollout: float
    tool_errors: int
    sample_trajectory: str  # the best-scored rollout, as [USER] / [ASSISTANT] / [TOOL CALL] / [TOOL RESULT]
    reasons: list[str]  # "score: why" per rollout, where the environment gives a reason (mcp: check or judge)


MAX_REASONS = 16


def read_groups(path: Path) -> list[dict[str, Any]]:
    """Every complete group line (a trailing half-written line is left for later)."""
    return [g for g in read_jsonl(path) if isinstance(g.get("scores"), list)]


def summarize(groups: list[dict[str, Any]], *, sample_chars: int = SAMPLE_CHARS) -> ScoreSummary:
    """Correct = the environment's own per-completion verdict (`overrides[i]["correct"]`, as the
    bundled environments report it) when present, else a positive score (the atropos
    convention). A step succeeds when at least one of its completions is correct. Samples are
    the best- and the worst-scored completions, so the agent sees both ends."""
    step_scores = [[_as_float(s) for s in g["scores"]] for g in groups]
    verdicts = [_verdicts(g, scores) for g, scores in zip(groups, step_scores)]
    flat = [s for scores in step_scores for s in scores if not math.isnan(s)]
    correct = sum(sum(v) for v in verdicts)
    completions = sum(len(v) for v in verdicts)
    ranked = sorted(
        ((score, step, i) for step, scores in enumerate(step_scores) for i, score in enumerate(scores)),
        key=lambda t: (math.isnan(t[0]), -t[0] if not math.isnan(t[0]) else 0.0, t[1], t[2]),
    )
    picks = ranked[:1] + ranked[1:][-1:]  # best and worst
    return ScoreSummary(
        steps_tested=len(groups),
        completions=completions,
        correct=correct,
        accuracy=correct / completions if completions else 0.0,
        step_success_rate=sum(1 for v in verdicts if any(v)) / len(groups) if groups else 0.0,
        mean_score=sum(flat) / len(flat) if flat else 0.0,
        step_scores=[[round(s, 4) for s in scores] for scores in step_scores],
        has_logprobs=any(_has_logprobs(g) for g in groups),
        samples=[_sample(groups[step], step, i, score, sample_chars) for score, step, i in picks],
        agent=_agent_stats(groups, picks[0][1:] if picks else None),
    )


def _agent_stats(groups: list[dict[str, Any]], best: tuple[int, int] | None) -> AgentStats | None:
    """Turns, tool calls and tool errors per rollout, from the overrides agent environments write."""
    rows = [o for g in groups for o in _overrides(g) if isinstance(o.get("turns"), int)]
    if not rows:
        return None
    trajectory = ""
    if best is not None:
        messages = groups[best[0]].get("messages") or []
        conv = messages[best[1]] if best[1] < len(messages) else None
        trajectory = format_trajectory(conv, TRAJECTORY_LIMITS) if isinstance(conv, list) else ""
    return AgentStats(
        turns_per_rollout=round(sum(o["turns"] for o in rows) / len(rows), 3),
        tool_calls_per_rollout=round(sum(int(o.get("tool_calls") or 0) for o in rows) / len(rows), 3),
        tool_errors=sum(int(o.get("tool_errors") or 0) for o in rows),
        sample_trajectory=trajectory,
        reasons=[
            f"{_as_float(score):.3g} {o['reason']}"
            for g in groups
            for score, o in zip(g["scores"], _overrides(g))
            if isinstance(o.get("reason"), str)
        ][:MAX_REASONS],
    )


def _overrides(group: dict[str, Any]) -> list[dict[str, Any]]:
    overrides = group.get("overrides")
    return [o for o in overrides if isinstance(o, dict)] if isinstance(overrides, list) else []


def _verdicts(group: dict[str, Any], scores: list[float]) -> list[bool]:
    overrides = group.get("overrides")
    overrides = overrides if isinstance(overrides, list) else []
    out = []
    for i, score in enumerate(scores):
        item = overrides[i] if i < len(overrides) else None
        own = item.get("correct") if isinstance(item, dict) else None
        out.append(own if isinstance(own, bool) else (not math.isnan(score) and score > 0))
    return out


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _has_logprobs(group: dict[str, Any]) -> bool:
    """True when the server returned real per-token logprobs: negative and varying. Prompt
    positions hold 1.0, and atroposlib's dummy managed server (plain chat APIs) a constant -0.5."""
    lps = group.get("inference_logprobs")
    if not isinstance(lps, list):
        return False
    values = {x for seq in lps if isinstance(seq, list) for x in seq if isinstance(x, (int, float)) and x < 0}
    return len(values) > 1


def _sample(group: dict[str, Any], step: int, index: int, score: float, limit: int) -> Sample:
    messages = group.get("messages") or []
    conv = messages[index] if index < len(messages) else []
    prompt, completion = _split(conv, limit)
    return Sample(step=step + 1, score=round(score, 4), prompt=_cut(prompt, limit), completion=_cut(completion, limit))


def _split(conv: Any, limit: int) -> tuple[str, str]:
    """(last user turn, last assistant turn). Without an assistant turn the text is what process
    mode decoded from the tokens, prompt and reply in one chat-templated string."""
    if isinstance(conv, str):
        return "", _tail(conv, limit)
    if not isinstance(conv, list) or not conv:
        return "", ""
    turns = [(m.get("role", ""), _text(m.get("content"))) if isinstance(m, dict) else ("", str(m)) for m in conv]
    assistant = [t for r, t in turns if r == "assistant"]
    users = [t for r, t in turns if r == "user"]
    if assistant:
        return (users[-1] if users else ""), assistant[-1]
    return _split_decoded(turns[-1][1], limit)


def _split_decoded(text: str, limit: int) -> tuple[str, str]:
    """Prompt and reply of a chat-templated text, cut at the last assistant header of the common
    templates (ChatML, Llama 3, Zephyr, Mistral); the whole text's end when there is none."""
    for marker in _ASSISTANT_MARKERS:
        at = text.rfind(marker)
        if at >= 0:
            reply = text[at + len(marker) :]
            for end in _END_MARKERS:
                reply = reply.replace(end, "")
            return _tail(text[:at], limit), reply.strip()
    return "", _tail(text, limit)


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def _text(content: Any) -> str:
    """Message content as text: a string, or the text parts of a multi-part content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
