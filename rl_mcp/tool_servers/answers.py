"""rl_write_mcp_tasks' answer: where the tasks were written and how many."""

from __future__ import annotations

from pydantic import BaseModel, Field


class TasksSaved(BaseModel):
    server: str
    path: str = Field(description="The JSONL file (the user may read and edit it)")
    tasks: int = Field(description="Tasks in the file now")
    added: int = Field(description="Tasks given in this call")
    train: int
    eval: int = Field(description="Held out for evaluation (eval_fraction, or the tasks' own `split`)")
    tools_checked: list[str] = Field(description="The tools the checks name")
    allow_list: str = Field(description="The tools a run with this `tools` may call")
    next_step: str


NEXT_AFTER_TASKS = (
    'rl_select_environment(name="mcp:{server}") (its tasks_file defaults to the file just saved), then '
    "rl_test_inference(num_steps=1, group_size=4) to see the tasks scored."
)
