"""The supervised set of a run: every source's examples, and every candidate refused with why. Held-out
evaluation items are never among the examples: a file's conversation that poses one is refused."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_atropos.agent.base_env import HermesAgentBaseEnv
from tinker_atropos.agent.loop import PROMPT_MASK
from tinker_atropos.run_files import atomic_write_text
from tinker_atropos.sft.conversations import Conversation, ConversationFileError, read_conversations
from tinker_atropos.sft.examples import Example, Refused, from_conversation, from_demonstration
from tinker_atropos.sft.hermes_sessions import read_sessions
from tinker_atropos.sft.settings import SftSettings
from tinker_atropos.sft.teacher import teacher_examples

logger = logging.getLogger("tinker_atropos.sft")
PARALLEL = 8  # demonstrations played at once (each in its own sandbox, through the real tools)


class NoExamples(ValueError):
    """Nothing is left to train on: the message names what was refused and why."""


@dataclass
class SupervisedSet:
    examples: list[Example] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)
    hermes_sessions: dict[str, Any] | None = None  # the export file's report (SessionSet.report), where read

    def counts(self) -> dict[str, dict[str, int]]:
        kept, refused = Counter(e.source for e in self.examples), Counter(r.source for r in self.refused)
        return {s: {"kept": kept[s], "refused": refused[s]} for s in sorted({*kept, *refused})}

    def require_examples(self) -> list[Example]:
        if self.examples:
            return self.examples
        shown = "; ".join(f"{r.source} {r.origin}: {r.reason}" for r in self.refused[:5])
        raise NoExamples(f"no supervised example is left ({len(self.refused)} refused{': ' + shown if shown else ''})")

    def summary(self, tokenizer: Any) -> dict[str, Any]:
        """What the agent sees before it trains: counts, the refusals, one example with its mask."""
        out: dict[str, Any] = {
            "counts": self.counts(),
            "examples": len(self.examples),
            "tokens": sum(len(e.tokens) for e in self.examples),
            "trained_tokens": sum(e.trained_tokens for e in self.examples),
            "refused": [{"source": r.source, "origin": r.origin, "reason": r.reason} for r in self.refused[:20]],
        }
        if self.hermes_sessions is not None:
            out["hermes_sessions"] = self.hermes_sessions
        if self.examples:
            out["example"] = rendered_with_mask(self.examples[0], tokenizer)
        return out


def rendered_with_mask(example: Example, tokenizer: Any) -> dict[str, Any]:
    """One example as text, cut where training starts and stops: `trained` spans are what the
    policy learns to write, the rest (system, user, tool results, template) weighs nothing."""
    spans: list[dict[str, Any]] = []
    for token, mask in zip(example.tokens, example.masks, strict=True):
        trained = mask != PROMPT_MASK
        if not spans or spans[-1]["trained"] != trained:
            spans.append({"trained": trained, "ids": []})
        spans[-1]["ids"].append(token)
    return {
        "source": example.source,
        "origin": example.origin,
        "spans": [{"trained": s["trained"], "text": tokenizer.decode(s["ids"])} for s in spans],
    }


async def build_set(
    env: HermesAgentBaseEnv, settings: SftSettings, teacher_env: HermesAgentBaseEnv | None = None
) -> SupervisedSet:
    """Each source of `settings`, in order, on environments whose setup() has run (`teacher_env`: the
    same environment talking to the teacher, for source 'teacher')."""
    out = SupervisedSet()
    if "demonstrations" in settings.sources:
        await _demonstrations(env, settings, out)
    if "file" in settings.sources:
        await _file(env, Path(str(settings.file)).expanduser(), out)
    if "hermes_sessions" in settings.sources:
        await _hermes_sessions(env, settings, out)
    if "teacher" in settings.sources and teacher_env is not None:
        for made in await teacher_examples(env, teacher_env, settings, logger.info):
            (out.examples if isinstance(made, Example) else out.refused).append(made)  # type: ignore[arg-type]
    return out


async def _demonstrations(env: HermesAgentBaseEnv, settings: SftSettings, out: SupervisedSet) -> None:
    gate = asyncio.Semaphore(PARALLEL)
    items = [await env.get_next_item() for _ in range(settings.items)]

    async def one(k: int, item: Any) -> Example | Refused:
        async with gate:
            return await from_demonstration(env, item, f"item {k}", settings.min_score)

    for made in await asyncio.gather(*(one(k, item) for k, item in enumerate(items))):
        (out.examples if isinstance(made, Example) else out.refused).append(made)  # type: ignore[arg-type]


async def _file(env: HermesAgentBaseEnv, path: Path, out: SupervisedSet) -> None:
    tools, _ = env._resolve_tools_for_group()
    try:
        read = read_conversations(path, tools)
    except ConversationFileError as exc:
        out.refused.append(Refused("file", str(path), str(exc)))
        return
    out.refused += [Refused("file", f"line {r.line}", r.reason) for r in read.refused]
    await _conversations(env, "file", [(f"line {c.line}", c) for c in read.kept], out)


async def _hermes_sessions(env: HermesAgentBaseEnv, settings: SftSettings, out: SupervisedSet) -> None:
    tools, _ = env._resolve_tools_for_group()
    path = Path(str(settings.sessions_file)).expanduser()
    try:
        read = read_sessions(path, tools, include_failed=settings.include_failed)
    except ConversationFileError as exc:
        out.refused.append(Refused("hermes_sessions", str(path), str(exc)))
        return
    out.refused += [Refused("hermes_sessions", n.origin, n.reason) for n in read.refused]
    out.refused += [
        Refused("hermes_sessions", n.origin, f"failed in Hermes, left out: {n.reason}") for n in read.failed
    ]
    await _conversations(env, "hermes_sessions", [(s.origin, s.conversation) for s in read.kept], out)
    kept = sum(1 for e in out.examples if e.source == "hermes_sessions")
    out.hermes_sessions = {**read.report(), "kept": kept, "include_failed": settings.include_failed}


async def _conversations(
    env: HermesAgentBaseEnv, source: str, conversations: list[tuple[str, Conversation]], out: SupervisedSet
) -> None:
    """Recorded conversations as examples, but for one that poses a held-out evaluation item."""
    held_out = {env.format_prompt(item) for item in getattr(env, "eval_items", None) or []}
    for origin, conversation in conversations:
        asked = [m["content"] for m in conversation.prompt if m["role"] == "user"]
        if held_out.intersection(asked):
            out.refused.append(Refused(source, origin, "it poses a held-out evaluation item"))
            continue
        made = await from_conversation(env, conversation, source, origin)
        (out.examples if isinstance(made, Example) else out.refused).append(made)  # type: ignore[arg-type]


def write_set(
    supervised: SupervisedSet,
    examples_path: Path,
    summary_path: Path,
    tokenizer: Any,
    plan: dict[str, Any] | None = None,
) -> None:
    """The examples (one JSON line each) and what the agent is shown of them (with the stage's plan
    where a preview timed it), written whole or not at all."""
    atomic_write_text(examples_path, "".join(json.dumps(e.as_json()) + "\n" for e in supervised.examples))
    atomic_write_text(summary_path, json.dumps({**supervised.summary(tokenizer), **(plan or {})}, indent=1))


def read_examples(path: Path) -> list[Example]:
    return [Example(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
