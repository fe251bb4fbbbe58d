"""Tasks written by the connected agent (or the user) for a tool server: validated, then saved as
JSONL where the user can read and edit them (`RL_MCP_HOME/mcp-tasks/<server>.jsonl`).

Validation is the environment's own reading (tinker_atropos/mcp_tools/tasks.py) plus the server's
tools: a check names a tool the server has, enabled by the allow-list (a destructive one only when
`tools` names it), and `called` constrains only arguments that tool takes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rl_mcp.errors import UserError
from rl_mcp.tool_servers.files import tasks_path
from rl_mcp.tool_servers.listing import ServerTools
from tinker_atropos.mcp_tools.tasks import Task, TaskError, parse_task, read_tasks, split_tasks
from tinker_atropos.mcp_tools.tool_policy import ToolPolicyError, refuse_unenabled
from tinker_atropos.run_files import atomic_write_text

MAX_TASKS = 5000


class TasksRejected(UserError):
    """Tasks that cannot be used: every problem named, nothing saved."""


@dataclass(frozen=True)
class SavedTasks:
    path: Path
    tasks: int
    added: int
    train: int
    eval: int
    tools_checked: list[str]
    allowed_note: str


def validate(server: ServerTools, rows: list[Any], tools: list[str] | None) -> list[Task]:
    """The rows as tasks for `server`, or TasksRejected listing each problem."""
    allowed = server.allowed(tools)
    by_name = {t.name: t for t in server.tools}
    tasks, problems = [], []
    for i, row in enumerate(rows, 1):
        try:
            task = parse_task(row)
            refuse_unenabled(task.tools_needed(), server.tools, allowed, server.server)
        except (TaskError, ToolPolicyError) as exc:
            problems.append(f"task {i}: {exc}")
            continue
        tasks.append(task)
        if task.check.kind == "called" and task.check.tool:
            takes = set((by_name[task.check.tool].input_schema.get("properties") or {}).keys())
            unknown = sorted(set(task.check.arguments) - takes)
            if unknown:
                problems.append(f"task {i}: {task.check.tool} takes no argument(s) {unknown}; it takes {sorted(takes)}")
    if problems:
        raise TasksRejected("nothing saved: " + "; ".join(problems))
    return tasks


def save_tasks(
    home: Path,
    server: ServerTools,
    rows: list[Any],
    *,
    tools: list[str] | None,
    mode: Literal["replace", "append"],
    eval_fraction: float,
) -> SavedTasks:
    """Validate and write; `append` keeps the saved tasks (a task with the same id is replaced)."""
    if not rows:
        raise TasksRejected("no tasks given: pass a list of {prompt, answer, check} objects")
    new = validate(server, rows, tools)
    path = tasks_path(home, server.server)
    kept: list[Task] = []
    if mode == "append" and path.exists():
        try:
            kept = read_tasks(path)
        except TaskError as exc:
            raise TasksRejected(
                f"the saved tasks in {path} do not read ({exc}): fix the file or use mode='replace'"
            ) from exc
    ids = {t.id for t in new}
    tasks = [t for t in kept if t.id not in ids] + new
    if len(tasks) > MAX_TASKS:
        raise TasksRejected(f"{len(tasks)} tasks is over the limit of {MAX_TASKS}: write fewer")
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "".join(json.dumps(t.to_json(), ensure_ascii=False) + "\n" for t in tasks))
    train, held = split_tasks(tasks, eval_fraction)
    checked = sorted({name for t in tasks for name in t.tools_needed()})
    return SavedTasks(path, len(tasks), len(new), len(train), len(held), checked, server.allowed(tools).note)
