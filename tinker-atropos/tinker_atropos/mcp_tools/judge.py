"""The `judge` reward: a judge model scores a group's rollouts relative to each other (RULER-style).

The group's transcripts go to an OpenAI-compatible chat endpoint (this run's own inference server by
default, or `judge_base_url` with the key in the variable `judge_api_key_var` names, never echoed)
with a rubric; it answers one score in 0..1 and a one-line reason per rollout. Anything else (no
answer, an HTTP error, text that does not parse, the wrong number of scores) is a JudgeError that
names what went wrong: never a silent 0.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from typing import Any, Protocol

import httpx

from tinker_atropos.agent.trajectory import format_trajectory
from tinker_atropos.http_tls import shared_tls
from tinker_atropos.mcp_tools.checks import Verdict
from tinker_atropos.mcp_tools.tasks import Task

DEFAULT_RUBRIC = (
    "You compare attempts by an AI assistant at the same task, made with the same tools. Score each "
    "from 0 to 1, relative to the others: the best attempt high, the worst low. Reward attempts that "
    "reach a correct answer, call the right tools with sensible arguments, and use what the tools returned; "
    "penalise made-up facts, tool errors left unhandled and no answer."
)
TRANSCRIPT_CHARS = 4000


class JudgeError(RuntimeError):
    """The judge could not be asked or its answer could not be used (the message says which)."""


class JudgeSettings(Protocol):
    judge_base_url: str | None
    judge_model: str | None
    judge_api_key_var: str | None
    judge_rubric: str
    judge_timeout_s: float


def build_prompt(task: Task, transcripts: Sequence[Sequence[dict[str, Any]]], rubric: str) -> list[dict[str, str]]:
    parts = [f"Task: {task.prompt}"]
    if task.answer is not None:
        parts.append(f"Reference answer: {task.answer}")
    for i, messages in enumerate(transcripts, 1):
        parts.append(f"--- attempt {i} ---\n{format_trajectory(list(messages))[:TRANSCRIPT_CHARS]}")
    parts.append(
        'Answer with JSON only: {"scores": [{"id": 1, "score": 0.0, "reason": "one line"}, ...]} '
        f"with one entry for each of the {len(transcripts)} attempts."
    )
    system = DEFAULT_RUBRIC + (f"\nAlso: {rubric.strip()}" if rubric.strip() else "")
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def parse_scores(text: str, n: int) -> list[Verdict]:
    """The judge's JSON answer as verdicts, or JudgeError quoting what it said."""
    match = re.search(r"\{.*\}", text, re.S)
    try:
        data = json.loads(match.group(0)) if match else None
        entries = data["scores"] if isinstance(data, dict) else None
        by_id = {int(e["id"]): e for e in entries} if isinstance(entries, list) else {}
        verdicts = [
            Verdict(float(by_id[i]["score"]), False, str(by_id[i].get("reason", ""))[:200]) for i in range(1, n + 1)
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise JudgeError(
            f"judge_unparseable: the judge's answer is not {n} scores in the JSON asked for ({type(exc).__name__}: "
            f"{exc}); it said: {text[:300]!r}. Use a stronger judge_model or check judge_base_url"
        ) from exc
    bad = [v.reward for v in verdicts if not 0.0 <= v.reward <= 1.0]
    if bad:
        raise JudgeError(f"judge_unparseable: scores {bad} are outside 0..1")
    return verdicts


async def judge_group(
    cfg: JudgeSettings, default: tuple[str, str], task: Task, transcripts: Sequence[Sequence[dict[str, Any]]]
) -> list[Verdict]:
    """One verdict per transcript, from one judge request; `default`: (base_url, model) of this run."""
    base_url = (cfg.judge_base_url or default[0]).rstrip("/")
    model = cfg.judge_model or default[1]
    headers = {}
    if cfg.judge_api_key_var:
        key = os.environ.get(cfg.judge_api_key_var)
        if not key:
            raise JudgeError(
                f"judge_key_missing: judge_api_key_var names {cfg.judge_api_key_var}, which is not set in the "
                "environment process: set it where rl-mcp runs and add its name to RL_MCP_PASS_ENV"
            )
        headers["Authorization"] = f"Bearer {key}"
    body = {
        "model": model,
        "messages": build_prompt(task, transcripts, cfg.judge_rubric),
        "temperature": 0.0,
        "max_tokens": 120 + 60 * len(transcripts),
    }
    try:
        async with httpx.AsyncClient(timeout=cfg.judge_timeout_s, verify=shared_tls()) as client:
            reply = await client.post(f"{base_url}/chat/completions", json=body, headers=headers)
    except httpx.HTTPError as exc:
        raise JudgeError(
            f"judge_unreachable: no answer from the judge at {base_url} ({type(exc).__name__}: {exc}); "
            "check judge_base_url, or that its server is running"
        ) from exc
    if reply.status_code != 200:
        raise JudgeError(
            f"judge_http_error: the judge at {base_url} answered HTTP {reply.status_code}: {reply.text[:200]}"
        )
    try:
        text = reply.json()["choices"][0]["message"]["content"] or ""
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise JudgeError(
            f"judge_unparseable: {base_url} did not answer as an OpenAI chat endpoint: {reply.text[:200]}"
        ) from exc
    return parse_scores(text, len(transcripts))
