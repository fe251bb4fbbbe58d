"""What rl_compare_runs says to the agent: its description."""

from __future__ import annotations

RL_COMPARE_RUNS = """\
Compare two to eight training runs side by side: which config fields differ, how each trained,
and which run is best.

<when_to_use>
After runs that differ in a setting (a learning rate, a group size, a fork), to decide which to
keep, export or continue. Works on running runs too (their figures so far).
</when_to_use>

<returns>
`config_differences`: each config.yaml field (dotted, e.g. trainer.learning_rate) whose values
differ, with each run's value (per-run names, ports and folders left out). Per run: status,
steps, first and last mean reward, `reward_gain` (mean reward of the last ceil(n/4) steps minus
that of the first ceil(n/4)), `training_seconds` (the sum of the steps' wait_seconds +
step_seconds: from the first batch request to the last step's end), `reward_per_minute`
(reward_gain / training minutes), held-out eval accuracy before training (step 0), last, and
best of trained weights (with steps), wall time, tokens trained, `cost_usd` (tokens trained x
the operator's price on a paid backend; 0 on local), backend and model, and the config's token
budget (total_steps x batch_size x max_token_length) with its price. `best_by_eval`: the highest
best eval of trained weights (ties: reached at the earlier step, then fewer tokens);
`best_by_reward_per_minute`: the highest reward per minute. A PNG comes as an
image: every run's reward curve (solid) and eval accuracy (dashed), one colour per run.
</returns>

<next_step>
rl_export_model(run_id) for the best run, or rl_start_training(resume_from=run_id, fork=true)
to continue it with another setting. Run ids come from rl_list_runs.
</next_step>
"""
