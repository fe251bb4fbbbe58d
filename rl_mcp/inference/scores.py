"""Scores from the JSONL that an atroposlib environment's `process` mode writes.

One line per scored group (a ScoredDataGroup: `tokens`, `masks`, `scores`, `messages`, ...).
The writer buffers, so a file being written may end in a half line: only lines that end in a
newline count. Samples come from `messages` (process mode always fills them, decoding the tokens
itself when the environment gave none), so the server never needs a tokenizer.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SAMPLE_CHARS = 400
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


def read_groups(path: Path) -> list[dict[str, Any]]:
    """Every complete, parseable group line; a trailing half-written line is left out."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    groups: list[dict[str, Any]] = []
    for line in text.split("\n")[:-1]:  # the last piece has no newline yet (or is empty)
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("scores"), list):
            groups.append(obj)
    return groups


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
    )


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
