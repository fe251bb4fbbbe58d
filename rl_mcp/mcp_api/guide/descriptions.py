"""The guide's text: the rl_workflow prompt an agent reads to walk the workflow, with what it should
know about an environment of its format (each format's `note`, rl_mcp/formats/)."""

from __future__ import annotations

from rl_mcp.formats import FORMATS

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
`{profile}` ({backend} backend).{money}{FORMATS[env_format].note if env_format in FORMATS else ""}

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
7. To use the trained model: rl_serve_model(run_id) serves it on a local OpenAI-compatible endpoint (its
   answer has the Hermes config and command); rl_export_model(run_id) writes it out for other programs.
Report to the user: the run id, the W&B project and run name, the reward trend, and the weights path.
"""
