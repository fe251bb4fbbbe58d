"""The `check` reward: a task's check against a rollout's transcript, with partial credit.

Full credit when the check passes. Otherwise a correct tool call still counts (`partial_credit`: a
call that ran without error; for `called`, half credit when the named tool was called with other
arguments or failed), and a tool call that did not parse counts a third of that: a small model learns the
format before the task. Standard library only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tinker_atropos.mcp_tools.tasks import Task


@dataclass(frozen=True)
class CallRecord:
    name: str
    arguments: dict[str, Any]
    result: str
    error: bool


@dataclass(frozen=True)
class Verdict:
    reward: float
    passed: bool
    reason: str


def is_error_result(content: str) -> bool:
    """Tool messages carry errors as {"error": ...} (the agent loop's format)."""
    try:
        data = json.loads(content)
    except ValueError:
        return False
    return isinstance(data, dict) and set(data) == {"error"}


def calls_of(messages: Sequence[dict[str, Any]]) -> list[CallRecord]:
    """Each parsed tool call with its result, in order (results matched by id, else by position)."""
    out: list[CallRecord] = []
    for i, m in enumerate(messages):
        if m.get("role") != "assistant" or not m.get("tool_calls"):
            continue
        results = []
        for later in messages[i + 1 :]:
            if later.get("role") != "tool":
                break
            results.append(later)
        by_id = {r.get("tool_call_id"): r for r in results if r.get("tool_call_id")}
        for k, call in enumerate(m["tool_calls"]):
            fn = call.get("function") or {}
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except ValueError:
                args = {}
            reply = by_id.get(call.get("id")) or (results[k] if k < len(results) else {})
            content = str(reply.get("content") or "")
            out.append(
                CallRecord(
                    fn.get("name") or "", args if isinstance(args, dict) else {}, content, is_error_result(content)
                )
            )
    return out


def final_answer(messages: Sequence[dict[str, Any]]) -> str | None:
    """The last assistant reply, when it calls no tool (a rollout cut off mid-call has none)."""
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    if last is None or last.get("tool_calls"):
        return None
    return str(last.get("content") or "")


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


def _same(want: Any, got: Any) -> bool:
    if isinstance(want, str) and isinstance(got, str):
        return _norm(want) == _norm(got)
    return bool(want == got)


def _lookup(result: str, path: str | None) -> str | None:
    """The tool's returned value: its whole text, or a dotted path into its JSON."""
    if not path:
        return result.strip()
    try:
        value: Any = json.loads(result)
    except ValueError:
        return None
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value if isinstance(value, str) else json.dumps(value)


def _answer_passes(kind: str, expected: str, answer: str) -> bool:
    if kind == "exact":
        return _norm(answer) == _norm(expected)
    if kind == "contains":
        return _norm(expected) in _norm(answer)
    return re.search(expected, answer) is not None


def score(task: Task, messages: Sequence[dict[str, Any]], partial_credit: float = 0.3) -> Verdict:
    """The reward of one rollout in [0, 1] and a one-line reason."""
    check = task.check
    calls = calls_of(messages)
    ok_calls = [c for c in calls if not c.error and c.name]
    answer = final_answer(messages)
    if check.kind == "called":
        named = [c for c in calls if c.name == check.tool]
        if any(not c.error and all(_same(v, c.arguments.get(k)) for k, v in check.arguments.items()) for c in named):
            return Verdict(1.0, True, f"called {check.tool} with the required arguments")
        if named:
            return Verdict(
                0.5 if partial_credit > 0 else 0.0, False, f"called {check.tool}, with other arguments or an error"
            )
    elif check.kind == "final_answer_from":
        sources = [c for c in ok_calls if c.name == check.tool]
        returned = [v for c in sources if (v := _lookup(c.result, check.field)) is not None]
        if answer is not None and any(_norm(v) in _norm(answer) for v in returned if v.strip()):
            return Verdict(1.0, True, f"the final answer states what {check.tool} returned")
        if sources:
            return Verdict(
                partial_credit, False, f"called {check.tool}, but the final answer does not state its result"
            )
        ok_calls = []  # only the named tool earns partial credit here
    else:
        assert check.value is not None
        if answer is not None and _answer_passes(check.kind, check.value, answer):
            return Verdict(1.0, True, f"final answer passes {check.kind}")
    if ok_calls:
        return Verdict(partial_credit, False, f"a correct tool call ({ok_calls[0].name}), the check failed")
    if calls or any("<tool_call>" in str(m.get("content") or "") for m in messages if m.get("role") == "assistant"):
        return Verdict(round(partial_credit / 3, 4), False, "a call that failed, did not parse or used another tool")
    return Verdict(0.0, False, "no tool call, and the check failed" if answer is not None else "no final answer")
