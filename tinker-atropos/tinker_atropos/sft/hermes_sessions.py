"""The `hermes_sessions` source of the supervised stage: a user's own Hermes sessions, read as
`hermes sessions export --format jsonl` (hermes-agent 0.19.0) writes them, checked against the
environment's tools. Standard library and what `conversations.py` uses; no hermes-agent, no
environment class (the Hermes task set's format reads its demonstrations with it too).

What such a file is (read from hermes-agent 0.19.0 and its exports; docs/hermes.md):
- One session per line, newest first: the `sessions` row of Hermes' state.db (`id`, `source`, `model`,
  `system_prompt`, `end_reason`, `message_count`, `tool_call_count`, ...) plus `messages`, its
  active rows in order: `role` (user, assistant, tool), `content`, on an assistant `tool_calls`
  (OpenAI form, `function.arguments` a JSON string) and `finish_reason`, on a tool result
  `tool_call_id` and `tool_name`.
- The export is redacted only with `--redact`; Hermes' tools mask some secrets in their output as
  they run (terminal output as code: key prefixes, not `PASSWORD=...` lines), and the model's own
  tool-call arguments are stored raw. So every session is redacted here by Hermes' export rules
  (`hermes_redact.py`) before anything else reads it, and the count is reported.
- Hermes records no "failed" flag. A failed turn (an API error, a cut reply, the iteration limit)
  returns `failed` to its caller and stores what it had: the messages end without the model's final
  answer, or with Hermes' own error text as the last reply; a reply cut at the output limit (or
  mid-stream) and the iteration limit leave a request Hermes wrote as a user message.
  `end_reason` says how the session closed (`agent_close`, `cli_close`, ...), `compression` that
  it continues in another session.

A failed session is labelled with why and left out unless `include_failed`; then what the model
wrote before the failure is its conversation (Hermes' own texts dropped). The session's system
prompt is not kept: examples are rendered with the environment's, as its rollouts are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_atropos.sft.conversations import (
    Conversation,
    ConversationFileError,
    ConversationRefused,
    transcript_conversation,
)
from tinker_atropos.sft.hermes_redact import Redactor

# What Hermes 0.19 itself writes into a session when a turn fails (agent/conversation_loop.py,
# agent/chat_completion_helpers.py): never the model's or the user's words. A request to the model
# as a user message, by how it starts, and what it says of the session:
HERMES_REQUESTS = {
    "You've reached the maximum number of tool-calling iterations allowed.": (
        "it reached Hermes' limit of tool-calling iterations (max_iterations)"
    ),
    "[System: Your previous response was truncated": (
        "a reply was cut at the output limit and Hermes asked the model to continue it"
    ),
    "[System: The previous response was cut off": "a reply was cut off mid-stream and Hermes asked for the rest",
    "[System: Your previous tool call": "a tool call was too large to arrive and Hermes asked for smaller ones",
}
HERMES_ERROR_REPLY = "I apologize, but I encountered "  # an assistant message Hermes writes itself


@dataclass(frozen=True)
class SessionNote:
    """A session left out, and why (failed in Hermes, or not a conversation of the environment)."""

    session: str
    line: int
    reason: str

    @property
    def origin(self) -> str:
        return _where(self.session, self.line)


@dataclass(frozen=True)
class SessionConversation:
    session: str
    conversation: Conversation
    failed: str | None = None  # why it failed in Hermes, where include_failed let it in

    @property
    def origin(self) -> str:
        return _where(self.session, self.conversation.line)


def _where(session: str, line: int) -> str:
    """Where a session is, for a person: its id and its line in the export."""
    return f"session {session} (line {line})"


@dataclass
class SessionSet:
    path: Path
    sessions: int = 0
    kept: list[SessionConversation] = field(default_factory=list)
    failed: list[SessionNote] = field(default_factory=list)  # failed in Hermes, left out
    refused: list[SessionNote] = field(default_factory=list)  # cannot be a conversation of the environment
    redacted_texts: int = 0  # texts where Hermes' export rules masked a secret

    def report(self) -> dict[str, Any]:
        """What a preview shows of the file: counts, and each session left out with why."""
        return {
            "file": str(self.path),
            "sessions": self.sessions,
            "conversations": len(self.kept),
            "failed_included": sum(1 for s in self.kept if s.failed),
            "failed_left_out": len(self.failed),
            "refused": len(self.refused),
            "redacted_texts": self.redacted_texts,
            "left_out": [{"session": n.session, "reason": n.reason} for n in [*self.failed, *self.refused][:20]],
        }


def read_sessions(path: Path, tools: list[dict[str, Any]], *, include_failed: bool = False) -> SessionSet:
    """The sessions of a `hermes sessions export --format jsonl` file as conversations, checked
    against the environment's `tools`. Raises ConversationFileError when the file cannot be read."""
    out = SessionSet(path=path)
    redactor = Redactor()
    for line, raw in _lines(path):
        out.sessions += 1
        try:
            session = _session(raw)
        except ConversationRefused as exc:
            out.refused.append(SessionNote("?", line, str(exc)))
            continue
        sid = "?" if session.get("id") is None else str(session["id"])
        messages = [m for m in redactor.value(session["messages"]) if isinstance(m, dict) and m.get("active", 1)]
        failed = failure(session, messages)
        if failed and not include_failed:
            out.failed.append(SessionNote(sid, line, failed))
            continue
        try:
            conversation = transcript_conversation(_openai(_before_failure(messages)), tools, line=line)
        except ConversationRefused as exc:
            out.refused.append(SessionNote(sid, line, f"{exc}{f' (it failed in Hermes: {failed})' if failed else ''}"))
            continue
        out.kept.append(SessionConversation(sid, conversation, failed))
    out.redacted_texts = redactor.texts
    return out


def failure(session: dict[str, Any], messages: list[dict[str, Any]]) -> str | None:
    """Why a session failed in Hermes, or None when the model answered its task to the end."""
    if session.get("end_reason") == "compression":
        return "Hermes compressed its context and went on in another session: this is only its first part"
    replies = [m for m in messages if m.get("role") == "assistant"]
    if not replies:
        return "the model never answered: Hermes' request failed before any reply (see Hermes' log)"
    requested = next((r for r in map(_hermes_request, messages) if r), None)
    if requested:
        return requested
    last = messages[-1]
    if last.get("role") == "assistant" and _is_hermes_error(last):
        return f"its last reply is Hermes' error text, not the model's: {_text(last.get('content'))[:160]!r}"
    if last.get("role") == "tool" or (last.get("role") == "assistant" and last.get("tool_calls")):
        return (
            "it ends on a tool call without the model's final answer: the request after it failed, "
            "or the session was cut off"
        )
    if last.get("role") == "user":
        return "it ends on a user message the model never answered"
    if last.get("finish_reason") == "length":
        return "its last reply was cut at the output limit (finish_reason 'length')"
    return None


def _lines(path: Path) -> list[tuple[int, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConversationFileError(
            f"{path}: no such file (make it with `hermes sessions export {path} --format jsonl`)"
        ) from None
    except IsADirectoryError:
        raise ConversationFileError(
            f"{path}: is a directory: name the file `hermes sessions export FILE --format jsonl` wrote"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConversationFileError(f"{path}: cannot be read ({exc})") from None
    lines = [(n, line) for n, line in enumerate(text.split("\n"), start=1) if line.strip()]
    if not lines:
        raise ConversationFileError(f"{path}: is empty (Hermes had no session to export)")
    return lines


def _session(raw: str) -> dict[str, Any]:
    try:
        record = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConversationRefused(f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        hint = (
            "a `--only user-prompts` record holds no replies: export without --only"
            if isinstance(record, dict) and "text" in record and "session_id" in record
            else 'expected a session of `hermes sessions export --format jsonl` (an object with "messages")'
        )
        raise ConversationRefused(f"not a Hermes session: {hint}")
    return record


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _hermes_request(message: dict[str, Any]) -> str | None:
    """What a user message Hermes wrote itself says of the session (None: not one of Hermes')."""
    if message.get("role") != "user":
        return None
    text = _text(message.get("content"))
    return next((why for start, why in HERMES_REQUESTS.items() if text.startswith(start)), None)


def _is_hermes_error(message: dict[str, Any]) -> bool:
    return not message.get("tool_calls") and _text(message.get("content")).startswith(HERMES_ERROR_REPLY)


def _before_failure(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the model wrote before it failed: up to Hermes' first request of its own, less a reply
    cut at the output limit, Hermes' error reply and an unanswered user message at the end."""
    cut = next((k for k, m in enumerate(messages) if _hermes_request(m)), len(messages))
    kept = messages[:cut]
    while kept and _hermes_tail(kept):
        kept.pop()
    return kept


def _hermes_tail(messages: list[dict[str, Any]]) -> bool:
    last = messages[-1]
    if last.get("role") == "assistant":
        return _is_hermes_error(last) or last.get("finish_reason") == "length"
    return last.get("role") == "user" and any(m.get("role") == "assistant" for m in messages)


def _openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Hermes' message rows as OpenAI messages (its bookkeeping columns dropped)."""
    out = []
    for m in messages:
        message: dict[str, Any] = {"role": m.get("role"), "content": m.get("content")}
        if m.get("tool_calls"):
            message["tool_calls"] = [
                {"id": c.get("id"), "type": "function", "function": c.get("function")} if isinstance(c, dict) else c
                for c in m["tool_calls"]
            ]
        if m.get("tool_call_id"):
            message["tool_call_id"] = m["tool_call_id"]
        out.append(message)
    return out
