"""The `file` source of the supervised stage: tool-using conversations read from a JSONL, in the two
forms users have, checked against the environment's own tools. Standard library and jsonschema only.

- OpenAI `messages` (Atropos/Hermes `process` output, ART, TRL, tinker-cookbook): assistant calls
  in `tool_calls` (or as `<tool_call>` text in `content`), results in `tool` messages.
- ShareGPT `conversations` (Hermes trajectory files): `human`/`gpt`/`tool` values, calls as
  `<tool_call>` text in a `gpt` value, results as `<tool_response>` blocks in a `tool` value.

Both forms give the same `Conversation`: the prompt before the first assistant turn, then each
assistant turn as the policy writes it (prose, then one hermes `<tool_call>` block per call) with the
results that answered it. A file's own `tools` (and a system message holding its `<tools>` prompt)
are ignored: examples are rendered with the environment's tool prompt, and a call to a tool the
environment does not offer, or with arguments its schema refuses, refuses the line. A bad line is
refused with its number and the reason; the others are kept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from tinker_atropos.agent.chat_format import text_of_parts
from tinker_atropos.agent.tool_calls import ToolCall, format_tool_call, parse_tool_calls


class ConversationFileError(ValueError):
    """The file as a whole is unusable: missing, not JSONL, or no conversation left after refusals."""


@dataclass(frozen=True)
class ToolCallRecord:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class AssistantTurn:
    text: str  # as the policy writes it: prose, then one hermes <tool_call> block per call
    calls: list[ToolCallRecord] = field(default_factory=list)
    results: list[str] = field(default_factory=list)  # the tool results answering `calls`, in order


@dataclass(frozen=True)
class Conversation:
    line: int  # 1-based line in the file
    prompt: list[dict[str, str]]  # system/user messages before the first assistant turn: {"role", "content"}
    turns: list[AssistantTurn]


@dataclass(frozen=True)
class Refusal:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


@dataclass(frozen=True)
class ConversationSet:
    path: Path
    kept: list[Conversation]
    refused: list[Refusal]

    def summary(self, shown: int = 5) -> str:
        """`kept N, refused M: line 3: ...; line 7: ...` (the first `shown` refusals)."""
        text = f"kept {len(self.kept)}, refused {len(self.refused)}"
        if self.refused:
            text += ": " + "; ".join(map(str, self.refused[:shown]))
            if len(self.refused) > shown:
                text += f"; ... {len(self.refused) - shown} more"
        return text

    def require_kept(self) -> list[Conversation]:
        """The kept conversations; raises ConversationFileError when none is left."""
        if not self.kept:
            raise ConversationFileError(f"{self.path}: no usable conversation ({self.summary()})")
        return self.kept


class ConversationRefused(ValueError):
    """One conversation's problem: a file's line becomes a Refusal; a teacher's transcript is rejected."""


@dataclass
class _Message:
    role: str  # system | user | assistant | tool
    text: str = ""
    calls: list[ToolCallRecord] = field(default_factory=list)
    results: list[str] = field(default_factory=list)  # a tool message: one or more results


_SHAREGPT_ROLES = {
    "system": "system",
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "tool": "tool",
}
_OPENAI_ROLES = ("system", "user", "assistant", "tool")
_RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)
_TOOLS_PROMPT = re.compile(r"<tools>.*</tools>", re.DOTALL)


def read_conversations(path: Path, tools: list[dict[str, Any]]) -> ConversationSet:
    """The conversations of the JSONL at `path`, checked against the environment's `tools` (OpenAI
    schemas). Raises ConversationFileError when the file cannot be read as JSONL at all."""
    checks = _validators(tools)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConversationFileError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConversationFileError(f"{path}: is a directory, not a JSONL file") from None
    except UnicodeDecodeError as exc:
        raise ConversationFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConversationFileError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    # "\n" alone ends a line: splitlines() would also split at a U+2028 inside a JSON string.
    lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if not lines:
        raise ConversationFileError(f"{path}: is empty (expected one JSON conversation per line)")
    kept: list[Conversation] = []
    refused: list[Refusal] = []
    for n, line in lines:
        try:
            kept.append(_conversation(n, line, checks))
        except ConversationRefused as exc:
            refused.append(Refusal(n, str(exc)))
    if not kept and len(lines) > 1 and _is_one_json_document(text):
        raise ConversationFileError(
            f"{path}: is one JSON document, not JSONL: write one conversation (a JSON object) per line"
        )
    return ConversationSet(path=path, kept=kept, refused=refused)


def transcript_conversation(messages: list[dict[str, Any]], tools: list[dict[str, Any]], line: int = 0) -> Conversation:
    """A transcript (OpenAI `messages`, as a teacher's rollout or a Hermes session leaves them) as a
    conversation, checked as a file's line is; ConversationRefused says why it cannot be one."""
    return _conversation(line, json.dumps({"messages": messages}), _validators(tools))


def _is_one_json_document(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _validators(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """Tool name -> a validator of its arguments, for the environment's OpenAI tool schemas."""
    checks: dict[str, Any] = {}
    for tool in tools:
        fn = tool.get("function", tool)
        schema = fn.get("parameters") or {}
        checks[fn["name"]] = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(
            schema
        )
    return checks


def _conversation(line: int, raw: str, checks: dict[str, Any]) -> Conversation:
    try:
        record = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConversationRefused(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(record, dict):
        raise ConversationRefused(f"not a JSON object (got a JSON {type(record).__name__})")
    if "messages" in record:
        messages = _openai_messages(record["messages"])
    elif "conversations" in record:
        messages = _sharegpt_messages(record["conversations"])
    else:
        raise ConversationRefused('has neither "messages" (OpenAI form) nor "conversations" (ShareGPT form)')
    prompt, turns = _assemble(messages)
    for turn in turns:
        for call in turn.calls:
            _check_call(call, checks)
    return Conversation(line=line, prompt=prompt, turns=turns)


def _entries(entries: Any, what: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each message of a conversation with where it is ("message 3"), every one a JSON object."""
    if not isinstance(entries, list):
        raise ConversationRefused(f"{what} must be a list")
    for i, entry in enumerate(entries, start=1):
        if not isinstance(entry, dict):
            raise ConversationRefused(f"message {i} is not a JSON object")
        yield f"message {i}", entry


def _openai_messages(entries: Any) -> list[_Message]:
    messages = []
    for where, entry in _entries(entries, '"messages" (a list of messages)'):
        role = entry.get("role")
        if role not in _OPENAI_ROLES:
            raise ConversationRefused(f"{where}: unknown role {role!r} (expected one of: {', '.join(_OPENAI_ROLES)})")
        text = _content(entry.get("content"), f"{where} ({role})")
        if role == "tool":
            messages.append(_Message("tool", results=[text]))
        elif role == "assistant":
            messages.append(_assistant(text, entry.get("tool_calls") or [], f"{where} (assistant)"))
        else:
            messages.append(_Message(role, text=text))
    return messages


def _content(value: Any, where: str) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, list):
        try:
            return text_of_parts(value)
        except ValueError as exc:
            raise ConversationRefused(f"{where}: {exc}") from exc
    raise ConversationRefused(f"{where}: content must be a string, null or a list of text parts")


def _assistant(content: str, entries: Any, where: str) -> _Message:
    """An assistant message: calls from `tool_calls` and/or `<tool_call>` text in its content."""
    parsed = parse_tool_calls(content)
    if parsed.errors:
        raise ConversationRefused(f"{where}: {parsed.errors[0]}")
    in_text = [ToolCallRecord(c.name, c.arguments) for c in parsed.calls]
    if not isinstance(entries, list):
        raise ConversationRefused(f"{where}: tool_calls must be a list")
    listed = [_openai_call(entry, f"{where} tool_calls[{k}]") for k, entry in enumerate(entries)]
    if in_text and listed and in_text != listed:
        raise ConversationRefused(f"{where}: its content and its tool_calls hold different tool calls")
    return _Message("assistant", text=parsed.content if in_text else content.strip(), calls=listed or in_text)


def _openai_call(entry: Any, where: str) -> ToolCallRecord:
    fn = entry.get("function") if isinstance(entry, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ConversationRefused(
            f'{where}: expected {{"type": "function", "function": {{"name": ..., "arguments": ...}}}}'
        )
    arguments = fn.get("arguments") or {}
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise ConversationRefused(f"{where}: arguments of {fn['name']!r} are not valid JSON: {exc.msg}") from None
    if not isinstance(arguments, dict):
        raise ConversationRefused(f"{where}: arguments of {fn['name']!r} must be a JSON object")
    return ToolCallRecord(fn["name"], arguments)


def _sharegpt_messages(entries: Any) -> list[_Message]:
    messages = []
    for where, entry in _entries(entries, '"conversations" (a list of {"from", "value"} objects)'):
        source, value = entry.get("from"), entry.get("value")
        role = _SHAREGPT_ROLES.get(source) if isinstance(source, str) else None
        if role is None:
            raise ConversationRefused(
                f'{where}: unknown "from" {source!r} (expected one of: {", ".join(_SHAREGPT_ROLES)})'
            )
        if not isinstance(value, str):
            raise ConversationRefused(f'{where} ({source}): "value" must be a string')
        if role == "tool":
            messages.append(_Message("tool", results=_tool_responses(value)))
        elif role == "assistant":
            messages.append(_assistant(value, [], f"{where} ({source})"))
        else:
            messages.append(_Message(role, text=value))
    return messages


def _tool_responses(value: str) -> list[str]:
    """The results in a ShareGPT `tool` value: one per `<tool_response>` block (the whole value when
    it has none); a block holding {"tool_call_id", "name", "content"} gives its content."""
    blocks = _RESPONSE.findall(value) or [value]
    results = []
    for block in blocks:
        block = block.strip()
        try:
            payload = json.loads(block)
        except ValueError:
            payload = None
        if isinstance(payload, dict) and "content" in payload:
            content = payload["content"]
            block = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        results.append(block)
    return results


def _assemble(messages: list[_Message]) -> tuple[list[dict[str, str]], list[AssistantTurn]]:
    """The prompt and the assistant turns of one conversation's messages."""
    prompt: list[dict[str, str]] = []
    turns: list[_Message] = []
    for message in messages:
        if message.role == "assistant":
            if not message.text and not message.calls:
                raise ConversationRefused(f"assistant turn {len(turns) + 1} has no text and no tool call")
            turns.append(message)
        elif message.role == "tool":
            if not turns:
                raise ConversationRefused("a tool result comes before any assistant turn")
            turns[-1].results.extend(message.results)
        elif turns:
            raise ConversationRefused(
                f"a {message.role} message after the first assistant turn is not supported: one task per conversation"
            )
        elif not (message.role == "system" and _TOOLS_PROMPT.search(message.text)):  # the file's tool prompt
            prompt.append({"role": message.role, "content": message.text})
    if not turns:
        raise ConversationRefused("no assistant turn")
    if not any(m["role"] == "user" for m in prompt):
        raise ConversationRefused("no user message before the first assistant turn")
    for k, turn in enumerate(turns, start=1):
        if len(turn.results) != len(turn.calls):
            raise ConversationRefused(
                f"assistant turn {k} makes {len(turn.calls)} tool call(s) "
                f"but {len(turn.results)} tool result(s) answer it"
            )
    return prompt, [AssistantTurn(text=_render(t), calls=t.calls, results=t.results) for t in turns]


def _render(turn: _Message) -> str:
    blocks = [format_tool_call(ToolCall(name=c.name, arguments=c.arguments, id="")) for c in turn.calls]
    return "\n".join([turn.text, *blocks] if turn.text else blocks)


def _check_call(call: ToolCallRecord, checks: dict[str, Any]) -> None:
    if call.name not in checks:
        offers = ", ".join(checks) or "none"
        raise ConversationRefused(f"calls tool {call.name!r} the environment does not offer (offers: {offers})")
    error = best_match(checks[call.name].iter_errors(call.arguments))
    if error is not None:
        where = "/".join(map(str, error.absolute_path)) or "arguments"
        raise ConversationRefused(f"tool {call.name!r}: its schema refuses the arguments ({where}: {error.message})")
