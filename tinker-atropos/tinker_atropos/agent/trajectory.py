"""A rollout's messages as readable text. Standard library only: the MCP server imports it to
show trajectories from `process` output (groups.jsonl `messages[i]`) without atroposlib."""

from __future__ import annotations

import json
from typing import Any

LIMITS = {"system": 300, "user": 1000, "assistant": 1000, "reasoning": 300, "args": 200, "tool": 500}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more chars]"


def _content(value: Any) -> str:
    """Message content as text: a string, or OpenAI content parts (text parts joined)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(p.get("text", "") if isinstance(p, dict) else str(p) for p in value)
    return str(value)


def format_trajectory(messages: list[dict[str, Any]], limits: dict[str, int] | None = None) -> str:
    """`[SYSTEM]`/`[USER]`/`[ASSISTANT]`/`[TEXT ACTION] {field: reply}`/`[TOOL CALL] name(args)`/
    `[TOOL RESULT]` blocks, each cut to a readable length (`limits` overrides LIMITS per kind)."""
    lim = {**LIMITS, **(limits or {})}
    parts: list[str] = []
    for msg in messages:
        role = msg.get("role", "unknown")
        content = _content(msg.get("content"))
        if role == "system":
            parts.append(f"[SYSTEM]\n{_cut(content, lim['system'])}")
        elif role == "user":
            parts.append(f"[USER]\n{_cut(content, lim['user'])}")
        elif role == "assistant":
            reasoning = _content(msg.get("reasoning_content"))
            if reasoning:
                parts.append(f"[ASSISTANT thinking]\n{_cut(reasoning, lim['reasoning'])}")
            if content:
                parts.append(f"[ASSISTANT]\n{_cut(content, lim['assistant'])}")
            if "action" in msg:  # a reply taken whole as the action (loop.TextAction): what was sent
                args = json.dumps(msg["action"], ensure_ascii=False)
                parts.append(f"[TEXT ACTION] {_cut(args, lim['args'])}")
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                args = fn.get("arguments", "{}")
                args = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                parts.append(f"[TOOL CALL] {fn.get('name', '?')}({_cut(args, lim['args'])})")
        elif role == "tool":
            parts.append(f"[TOOL RESULT] {_cut(content, lim['tool'])}")
        else:
            parts.append(f"[{role.upper()}]\n{_cut(content, lim['user'])}")
    return "\n\n".join(parts)
