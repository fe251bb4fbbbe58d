"""What the server says as a whole: its instructions, and the annotations every tool states.

Each tool family keeps its own prose beside its code (`<family>/descriptions.py`): every tool's
description says what it does, when to call it, what comes back and what to call next, so an agent
can walk the whole workflow from the tool list alone; and each answer's next step.
"""

from typing import TypedDict

from mcp.types import ToolAnnotations


class ToolFace(TypedDict):
    title: str
    annotations: ToolAnnotations


def tool_face(title: str, *, read_only: bool, destructive: bool, idempotent: bool, open_world: bool) -> ToolFace:
    """A tool's title (top level, as clients of 2025-11-25 and later show it, and in its annotations
    for older ones) and every hint set explicitly: clients decide from these when to ask a person.
    `open_world`: the tool may reach beyond this machine (Tinker's cloud, the Hub, a package index,
    a teacher or judge endpoint, a user's HTTP tool server); the spec's default is true."""
    hints = ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=open_world,
    )
    return {"title": title, "annotations": hints}


INSTRUCTIONS = """\
rl-mcp runs reinforcement learning (GRPO with LoRA) on Atropos environments, on Tinker's remote
GPUs or on this machine (the operator's profile decides which; see rl://profile).

Workflow:
1. rl_list_environments -> pick one.
2. rl_select_environment(name) -> its config fields, with which are locked by the profile.
3. rl_edit_config(field, value) as needed; rl_get_current_config to review.
4. rl_test_inference -> check the environment scores real completions before training.
5. rl_start_training -> a run id; rl_check_status(run_id) to follow it (it is rate-limited:
   wait the interval it names), rl_stop_training to stop, rl_get_results for metrics and weights.
6. rl_serve_model(run_id) -> the trained model on a local OpenAI-compatible endpoint, with what makes
   Hermes use it; rl_export_model writes it out (adapter, merged, GGUF).
Runs keep going when the client disconnects; rl_list_runs shows them all, and
rl_compare_runs puts two to eight of them side by side.
"""
