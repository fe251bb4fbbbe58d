"""Client-side tool-call parsing for raw model text (the `hermes` format of Hermes/Qwen models).

When the trainer samples tokens itself there is no server-side parser: the policy's text is parsed
here. A malformed block never raises; it becomes an error string the agent loop sends back to the
model, so the policy is told (and penalised) rather than the rollout crashing.

Inside `<tool_call>...</tool_call>` the canonical form is `{"name": ..., "arguments": {...}}`; the
forms small models really write are read too: a JSON list of such objects (several calls in one
block), `"parameters"` for `"arguments"` (Llama/SmolLM), arguments double-encoded as a JSON string,
the OpenAI wrapper `{"type": "function", "function": {"name": ..., "arguments": ...}}`, and the
JSON wrapped in a ```json code fence.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

SUPPORTED_PARSERS = ("hermes",)

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
# A block ends at its closing tag; one that never closes runs to the next opening tag or the end.
_BLOCK = re.compile(
    re.escape(_OPEN) + r"(.*?)(" + re.escape(_CLOSE) + r"|(?=" + re.escape(_OPEN) + r")|\Z)",
    re.DOTALL,
)


class UnknownToolCallParser(ValueError):
    """The configured `tool_call_parser` is not one this module implements."""


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any]
    id: str


@dataclass
class ParsedReply:
    content: str
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def new_call_id() -> str:
    """An OpenAI-style call id (`call_...`), unique per call."""
    return f"call_{uuid.uuid4().hex[:24]}"


def parse_tool_calls(text: str, parser: str = "hermes") -> ParsedReply:
    """Split `text` into the prose around tool-call blocks, the valid calls and per-block errors."""
    if parser not in SUPPORTED_PARSERS:
        raise UnknownToolCallParser(f"unknown tool_call_parser {parser!r}; supported: {', '.join(SUPPORTED_PARSERS)}")
    calls: list[ToolCall] = []
    errors: list[str] = []
    outside: list[str] = []
    pos = 0
    for n, match in enumerate(_BLOCK.finditer(text), start=1):
        outside.append(text[pos : match.start()])
        pos = match.end()
        body, closed = match.group(1), bool(match.group(2))
        found, problems = _parse_block(body.strip(), closed)
        calls.extend(found)
        errors.extend(f"tool call #{n}: {problem}" for problem in problems)
    outside.append(text[pos:])
    content = "".join(outside).replace(_CLOSE, "").strip()
    return ParsedReply(content=content, calls=calls, errors=errors)


_FENCE = re.compile(r"\A```[\w-]*[ \t]*\n?(.*?)\n?```\Z", re.DOTALL)
_OBJECT = 'expected a JSON object {"name": ..., "arguments": {...}}'


def _parse_block(body: str, closed: bool) -> tuple[list[ToolCall], list[str]]:
    """The calls in one block's body, and what is wrong with the rest of it."""
    if not closed:
        return [], [f"unclosed {_OPEN} tag (expected {_CLOSE} after the JSON object)"]
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        return [], [f"invalid JSON inside {_OPEN}: {exc.msg} (line {exc.lineno} column {exc.colno})"]
    if not isinstance(payload, list):
        call, error = _call_from(payload)
        return ([call], []) if call is not None else ([], [error])
    if not payload:
        return [], [f"empty JSON list: {_OBJECT} or a list of them"]
    calls, errors = [], []
    for i, item in enumerate(payload, start=1):
        call, error = _call_from(item)
        if call is not None:
            calls.append(call)
        else:
            errors.append(f"item {i} of the list: {error}")
    return calls, errors


def _call_from(payload: Any) -> tuple[ToolCall | None, str]:
    if not isinstance(payload, dict):
        return None, _OBJECT
    if "name" not in payload and isinstance(payload.get("function"), dict):
        payload = payload["function"]  # the OpenAI wrapper {"type": "function", "function": {...}}
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        return None, 'missing "name" (a non-empty string naming the tool)'
    key = "arguments" if "arguments" in payload or "parameters" not in payload else "parameters"
    arguments = payload.get(key, {})
    if isinstance(arguments, str):  # some models double-encode the arguments
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        return (
            None,
            f'"{key}" of {name!r} must be a JSON object, got {type(arguments).__name__}',
        )
    return ToolCall(name=name, arguments=arguments, id=new_call_id()), ""


def format_tool_call(call: ToolCall) -> str:
    """The hermes block a model should emit for `call` (demonstrations, SFT data, tests)."""
    payload = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{_OPEN}\n{payload}\n{_CLOSE}"
