"""The `teacher` source: rejection sampling through the environment. A stronger policy plays the
environment (its own prompts, tools and reward) through an OpenAI-compatible endpoint; a rollout is
kept where the environment's reward reaches `min_score`, it made a well-formed tool call, and it is
among the best `keep_per_item` of its item. Kept transcripts become examples exactly as a file's
conversations do (the student's chat template and tool prompt, the recorded tool results).

The endpoint is a cloud model (its key read from the variable the operator names, never echoed) or
an earlier run's adapter, served here by the product's own inference server ("distill run A into B").
Before any rollout the endpoint is asked for its models: unreachable or unauthorized fails at once.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tinker_atropos.agent.base_env import HermesAgentBaseEnv
from tinker_atropos.agent.loop import AgentResult
from tinker_atropos.http_tls import shared_tls
from tinker_atropos.sft.conversations import ConversationRefused, transcript_conversation
from tinker_atropos.sft.examples import Example, Refused, from_conversation
from tinker_atropos.sft.settings import SftSettings, TeacherSettings
from tinker_atropos.trainer.config import RunConfig

PROBE_TIMEOUT_S = 10.0
LOCAL_KEY = "local"  # the product's own server takes no key


class TeacherUnavailable(ValueError):
    """The teacher cannot be asked: unreachable, unauthorized, its key variable unset, its adapter unloadable."""


@asynccontextmanager
async def teacher_server(cfg: RunConfig, teacher: TeacherSettings) -> AsyncIterator[dict[str, Any]]:
    """The `openai` entry a teacher environment talks to, for as long as the block lasts."""
    if teacher.adapter is None:
        key = _key(teacher)
        await probe(str(teacher.base_url), key)
        yield {"base_url": teacher.base_url, "model_name": teacher.model, "api_key": key, "server_type": "openai"}
        return
    from tinker_atropos.backends.factory import BackendUnavailable, create_base_sampler
    from tinker_atropos.inference_server import SamplerHolder, build_app, serve_in_thread
    from tinker_atropos.reply_cap import served_cap

    try:
        sampler = await asyncio.to_thread(create_base_sampler, cfg, teacher.adapter)
    except BackendUnavailable as exc:
        raise TeacherUnavailable(f"teacher adapter {teacher.adapter!r} cannot be served: {exc}") from exc
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(cfg.env.tokenizer_name or cfg.trainer.base_model)
    cap = served_cap(cfg.trainer.base_model, cfg.trainer.max_reply_tokens)
    app = build_app(SamplerHolder(sampler), cfg.trainer.base_model, tokenizer, cap)
    handle = serve_in_thread(app, "127.0.0.1", 0)
    try:
        yield {
            "base_url": f"{handle.url}/v1",
            "model_name": cfg.trainer.base_model,
            "api_key": LOCAL_KEY,
            "server_type": "openai",
        }
    finally:
        await asyncio.to_thread(handle.stop)


def _key(teacher: TeacherSettings) -> str:
    if teacher.api_key_var is None:
        return LOCAL_KEY
    key = os.environ.get(teacher.api_key_var)
    if not key:
        raise TeacherUnavailable(
            f"the teacher's key variable {teacher.api_key_var} is not set in the server's environment"
        )
    return key


async def probe(base_url: str, key: str) -> None:
    """GET {base_url}/models: TeacherUnavailable, naming the endpoint and never the key, unless it answers."""
    try:
        async with httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, trust_env=False, verify=shared_tls()) as client:
            reply = await client.get(f"{base_url.rstrip('/')}/models", headers={"Authorization": f"Bearer {key}"})
    except httpx.HTTPError as exc:
        raise TeacherUnavailable(f"the teacher at {base_url} is unreachable: {type(exc).__name__}: {exc}") from exc
    if reply.status_code in (401, 403):
        raise TeacherUnavailable(
            f"the teacher at {base_url} refused the key (HTTP {reply.status_code}): check api_key_var's variable"
        )
    if reply.status_code >= 400:
        raise TeacherUnavailable(f"the teacher at {base_url} answered HTTP {reply.status_code} to GET /models")


def _well_formed_calls(result: AgentResult) -> int:
    return sum(len(m.get("tool_calls") or []) for m in result.messages if m.get("role") == "assistant")


async def teacher_examples(
    student: HermesAgentBaseEnv, teacher_env: HermesAgentBaseEnv, settings: SftSettings, note: Callable[[str], None]
) -> list[Example | Refused]:
    """`settings.items` training items, each played `samples_per_item` times by the teacher, filtered."""
    teacher = settings.teacher
    assert teacher is not None
    tools, _ = student._resolve_tools_for_group()
    made: list[Example | Refused] = []
    for k in range(settings.items):
        item = await teacher_env.get_next_item()
        rolled = await asyncio.gather(
            *(teacher_env.rollout(item, temperature=teacher.temperature) for _ in range(teacher.samples_per_item))
        )
        passing: list[tuple[float, str, AgentResult]] = []
        for j, (result, reward) in enumerate(rolled):
            origin = f"item {k} sample {j}"
            if reward < settings.min_score:
                made.append(
                    Refused("teacher", origin, f"its reward {reward:g} is under min_score {settings.min_score:g}")
                )
            elif not _well_formed_calls(result):
                made.append(Refused("teacher", origin, "it made no well-formed tool call"))
            else:
                passing.append((reward, origin, result))
        passing.sort(key=lambda p: -p[0])
        for rank, (_reward, origin, result) in enumerate(passing):
            if rank >= teacher.keep_per_item:
                made.append(Refused("teacher", origin, f"not among the best {teacher.keep_per_item} of its item"))
                continue
            try:
                conversation = transcript_conversation(result.messages, tools)
            except ConversationRefused as exc:
                made.append(Refused("teacher", origin, f"its transcript cannot be an example: {exc}"))
                continue
            example = await from_conversation(student, conversation)
            made.append(
                Example("teacher", origin, example.tokens, example.masks, example.tool_calls)
                if isinstance(example, Example)
                else Refused("teacher", origin, example.reason)
            )
        note(f"teacher: item {k + 1}/{settings.items}")
    return made
