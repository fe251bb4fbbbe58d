"""The tasks file of an `mcp` environment: JSON lines of `prompt`, optional `answer`, a `check`.

A check is one of
  {"exact": "..."} / {"contains": "..."} / {"regex": "..."}   the final answer (true: the task's answer)
  {"called": "tool", "arguments": {"name": value}}            that tool called with those arguments
  {"final_answer_from": "tool", "field": "a.b"}               the final answer states what the tool returned
and an optional `split` ("train" / "eval") fixes a task's side of the train/eval split. Standard library
only: the server validates what an agent writes with the same code the environment reads it with.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

CHECK_KINDS = ("exact", "contains", "regex", "called", "final_answer_from")
TASK_FIELDS = {"prompt", "answer", "check", "split", "id"}
TOOL_KINDS = ("called", "final_answer_from")


class TaskError(ValueError):
    """A task (or the file) that cannot be used; the message names the line and the fix."""


@dataclass(frozen=True)
class Check:
    kind: str
    value: str | None = None  # exact / contains / regex
    tool: str | None = None  # called / final_answer_from
    arguments: dict[str, Any] = field(default_factory=dict)  # called: required argument values
    field: str | None = None  # final_answer_from: a dotted path into the tool's JSON result

    def to_json(self) -> dict[str, Any]:
        if self.kind in TOOL_KINDS:
            out: dict[str, Any] = {self.kind: self.tool}
            if self.arguments:
                out["arguments"] = self.arguments
            if self.field:
                out["field"] = self.field
            return out
        return {self.kind: self.value}


@dataclass(frozen=True)
class Task:
    prompt: str
    check: Check
    answer: str | None = None
    split: str | None = None
    id: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "prompt": self.prompt}
        if self.answer is not None:
            out["answer"] = self.answer
        out["check"] = self.check.to_json()
        if self.split:
            out["split"] = self.split
        return out

    def tools_needed(self) -> list[str]:
        return [self.check.tool] if self.check.tool else []


def parse_check(raw: Any, answer: str | None) -> Check:
    """A check object, or TaskError saying which forms there are."""
    forms = (
        '{"exact"|"contains"|"regex": "text" or true}, {"called": "tool", "arguments": {...}}, '
        '{"final_answer_from": "tool", "field": "a.b"}'
    )
    if not isinstance(raw, dict):
        raise TaskError(f"`check` must be an object, one of {forms}")
    kinds = [k for k in CHECK_KINDS if k in raw]
    extra = set(raw) - set(CHECK_KINDS) - {"arguments", "field"}
    if len(kinds) != 1 or extra:
        raise TaskError(f"`check` {json.dumps(raw)[:120]} must have exactly one kind of {forms}")
    kind = kinds[0]
    value = raw[kind]
    if kind in TOOL_KINDS:
        if not isinstance(value, str) or not value:
            raise TaskError(f"`{kind}` must name a tool")
        arguments = raw.get("arguments") or {}
        if not isinstance(arguments, dict) or (arguments and kind != "called"):
            raise TaskError("`arguments` is an object of argument values, for `called` only")
        path = raw.get("field")
        if path is not None and (kind != "final_answer_from" or not isinstance(path, str) or not path):
            raise TaskError("`field` is a dotted path (e.g. target.datetime), for `final_answer_from` only")
        return Check(kind, tool=value, arguments=dict(arguments), field=path)
    if "arguments" in raw or "field" in raw:
        raise TaskError(f"`arguments` and `field` do not apply to `{kind}`")
    if value is True:
        if answer is None:
            raise TaskError(f'`{{"{kind}": true}}` checks the task\'s `answer`, which it lacks')
        value = answer
    if not isinstance(value, str) or not value:
        raise TaskError(f"`{kind}` must be non-empty text (or true: the task's answer)")
    if kind == "regex":
        try:
            re.compile(value)
        except re.error as exc:
            raise TaskError(f"`regex` {value!r} does not compile: {exc}") from exc
    return Check(kind, value=value)


def parse_task(raw: Any) -> Task:
    if not isinstance(raw, dict):
        raise TaskError('a task is a JSON object: {"prompt": ..., "answer": ..., "check": {...}}')
    unknown = sorted(set(raw) - TASK_FIELDS)
    if unknown:
        raise TaskError(f"unknown field(s) {unknown}; a task has {sorted(TASK_FIELDS)}")
    prompt, answer, split = raw.get("prompt"), raw.get("answer"), raw.get("split")
    if not isinstance(prompt, str) or not prompt.strip():
        raise TaskError("`prompt` must be non-empty text")
    if answer is not None and not isinstance(answer, (str, int, float)):
        raise TaskError("`answer` must be text or a number")
    if split not in (None, "train", "eval"):
        raise TaskError(f"`split` must be 'train' or 'eval', not {split!r}")
    if "check" not in raw:
        raise TaskError('`check` is missing (e.g. {"contains": true} checks the answer)')
    text = None if answer is None else str(answer)
    check = parse_check(raw["check"], text)
    ident = raw.get("id") or hashlib.sha256(prompt.encode()).hexdigest()[:10]
    return Task(prompt=prompt, check=check, answer=text, split=split, id=str(ident))


def parse_tasks(rows: Sequence[Any], where: str = "task") -> list[Task]:
    """Every row parsed, or TaskError naming each bad row (all of them, so one fix pass is enough)."""
    tasks, problems = [], []
    for i, row in enumerate(rows, 1):
        try:
            tasks.append(parse_task(row))
        except TaskError as exc:
            problems.append(f"{where} {i}: {exc}")
    if problems:
        raise TaskError("; ".join(problems))
    return tasks


def read_tasks(path: Path) -> list[Task]:
    """A JSONL file's tasks, or TaskError naming the file, the line and the fix."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise TaskError(
            f"tasks file {path} cannot be read ({exc}): write one (rl_write_mcp_tasks) or fix `tasks_file`"
        ) from exc
    rows = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError as exc:
            raise TaskError(f"{path} line {i} is not JSON ({exc})") from exc
    if not rows:
        raise TaskError(f"tasks file {path} has no tasks")
    return parse_tasks(rows, where=f"{path} line")


class Splittable(Protocol):
    @property
    def split(self) -> str | None: ...


S = TypeVar("S", bound=Splittable)


def split_tasks(tasks: Sequence[S], eval_fraction: float, seed: int = 0) -> tuple[list[S], list[S]]:
    """(train, eval) of tasks (or an OpenEnv environment's items): a task's own `split` first; the
    rest shuffled by `seed`, `eval_fraction` of them held out (at least one when there are two or more
    and the fraction is above 0)."""
    fixed_train = [t for t in tasks if t.split == "train"]
    fixed_eval = [t for t in tasks if t.split == "eval"]
    free = [t for t in tasks if t.split is None]
    random.Random(seed).shuffle(free)
    n_eval = round(len(free) * eval_fraction)
    if eval_fraction > 0 and n_eval == 0 and len(free) >= 2:
        n_eval = 1
    train = fixed_train + free[n_eval:]
    held = fixed_eval + free[:n_eval]
    return (train or held), held
