"""The guide's text: the rl_workflow prompt an agent reads to walk the workflow, with what it should
know about an environment of each format (a tool server's included)."""

from __future__ import annotations

MCP_FORMAT_NOTE = (
    " It is one of the user's MCP tool servers: every tool call of a rollout is a real MCP tools/call. "
    "It needs tasks: read the server's tools in rl_list_environments (`tool_servers`) and write them with "
    "rl_write_mcp_tasks(server, tasks) before step 3 (or set `tasks_file`). `tools` is the allow-list "
    "(default: the read-only tools); `reward` is `check` (each task's check, partial credit for a correct "
    "call) or `judge` (a judge model ranks each group; judge_base_url, judge_model). A small local model "
    "often makes no tool call at all at first: rl_test_inference's trajectories show it."
)

SFT_NOTE = (
    " A small model that never writes a tool call learns nothing from RL alone (every rollout scores the "
    "same): where rl_test_inference shows no tool calls, set `sft` (rl_edit_config(field='sft', value="
    "{'sources': ['demonstrations']}), or 'file' with a JSONL of conversations that call its tools), look "
    "at what it would train on with rl_preview_sft, and the run trains a supervised stage before RL."
)

# What an agent should know about an environment of each format before it edits a field.
FORMAT_NOTES = {
    "hermes": " It is an agent environment: its episodes are multi-turn with tools (max_agent_turns, "
    "enabled_toolsets, terminal_backend)." + SFT_NOTE,
    "reasoning-gym": " It is a reasoning-gym task: the fields in section `task` are its generator's "
    "settings (difficulty, sizes).",
    "verifiers": " It is a verifiers environment, run from its own code in the verifiers venv: the fields "
    "in section `verifiers` are its load_environment arguments; its rubric scores the replies, and a long "
    "prompt (tools, many turns) counts against max_token_trainer_length.",
    "verifiers-v1": " It is a verifiers-v1 environment, run from its own code in the verifiers-v1 venv: "
    "the fields in section `verifiers` are its EnvConfig's; its Task's rewards score the episodes.",
    "mcp": MCP_FORMAT_NOTE + SFT_NOTE,
    "openenv": " It is an OpenEnv environment, served from its own venv: each rollout is one episode "
    "(reset with an item's arguments, its observation the first message; then a step per action, until "
    "`done` or max_agent_turns), scored by its step rewards summed. An MCP environment offers its own tools. "
    "A typed one's action is, by `action_mode`, the model's plain reply ('text': its one required field, a "
    "string; the default where the action fits, so a model that writes no tool call still acts) or the tool "
    "`step` ('tool'). "
    '`items_file` (a JSONL of {"reset": {...}}) sets the episodes; else its own Task API, else seeds.'
    " It has no demonstrations: a model that calls no tool gets `sft` from a 'file' of "
    "conversations or a 'teacher' (rl_preview_sft shows the examples).",
}


SIGNALS = (
    "demonstrations of the task -> the supervised stage (`sft`) first; a stronger model that shares this "
    "model's tokenizer (a finished run's id from rl_list_runs, a base model, or an endpoint with teacher_url) -> "
    "on-policy distillation (`teacher`: every reply token scored by it, reward_coef 0 for distillation alone, "
    "1 beside the reward); only a reward -> RL, the default. rl_compare_runs puts a distilled run beside an RL run."
)


def workflow_prompt(
    *,
    environment: str,
    env_format: str,
    description: str,
    profile: str,
    backend: str,
    paid: bool,
    status_interval_s: float,
    focus_field: str | None,
) -> str:
    """The rl_workflow prompt: the whole workflow for one environment, as instructions to an agent."""
    focus = (
        f" Look at `{focus_field}` first (rl://config/{focus_field} shows its value, bounds and meaning)."
        if focus_field
        else ""
    )
    money = (
        " This profile trains on a paid backend: rl_start_training shows the token budget (and cost, "
        "if the operator set a price) and asks the user to confirm where the client can ask; say what "
        "it will spend before you call it."
        if paid
        else " This profile trains on this machine: nothing is paid."
    )
    return f"""\
Train the RL environment `{environment}` ({description or "no description"}) with rl-mcp, on profile
`{profile}` ({backend} backend).{money}{FORMAT_NOTES.get(env_format, "")}

1. rl_select_environment(name="{environment}"): read the config fields; `locked` ones come from the
   operator and cannot be edited.
2. rl_edit_config(field, value) for what the task needs (group_size, batch_size, total_steps, ...).{focus}
   rl_get_current_config to review. Pick the training signal by what you have:
   {SIGNALS}
3. rl_test_inference(num_steps=2, group_size=4): check that `environment_working` is true and that
   scores within a group differ (all-equal groups teach nothing). Fix and test again if not.
4. rl_start_training(): note the run_id. It answers at once; the run starts in the background.
5. rl_check_status(run_id) once to see it reach `running`, then no more often than every
   {status_interval_s:.0f} s (the server refuses earlier checks and says how long to wait). In between, read
   rl://runs/<run_id>/metrics or rl://runs/<run_id>/logs/trainer if you need to, or do other work.
6. When the status is `completed`: rl_get_results(run_id) for the final metrics, the reward curve and
   the weights path. If it `failed`: read `error` and `failure_log_tail`, fix with rl_edit_config,
   and start again. rl_stop_training(run_id) stops a run early.
Report to the user: the run id, the W&B project and run name, the reward trend, and the weights path.
"""
