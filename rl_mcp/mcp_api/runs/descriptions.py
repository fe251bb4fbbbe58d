"""What the run tools say to the agent: each tool's description
(the next step an answer suggests is built with the answer, in its domain room)."""

from __future__ import annotations

RL_START_TRAINING = """\
Start a GRPO/LoRA training run of the selected environment with the current config.

<when_to_use>
After rl_select_environment (and rl_edit_config / rl_test_inference as needed). Each call starts
a new, independent run; several runs can go at once.
</when_to_use>

<behaviour>
Checks first (an environment is selected and its file exists; on the Tinker profile,
TINKER_API_KEY is set and starts with `tml-`), writes the run config (profile locked values +
your edits + this run's own ports) and answers at once with the run id, status `starting`, the
config path and the log paths. In the background it starts run-api, then the trainer (waits for
its inference server), then the environment (waits until it registers); the run becomes
`running`. If a stage fails the run becomes `failed` with the stage, the exit code and the end of
its log, and nothing of it is left running. With wait=true the call returns only once the run is
running or has failed, reporting each stage as progress. Runs keep going when the client
disconnects. An agent environment whose `sft` section is set first trains a supervised stage
(stage `sft`, before run-api: rl_check_status shows its step, loss and evaluations), then RL on the
same adapter from where it ended; rl_preview_sft shows what it trains on before you start.
A `teacher` in the config (on-policy distillation) is checked first: a run id becomes its handed-out
weights, and a teacher whose tokenizer differs from the model's is refused with the reason before
anything starts; each step it scores the student's reply tokens (`teacher_kl` in the metrics).

Resume and fork: `resume_from=<run_id>` continues that (stopped, failed, lost or completed) run
from its latest saved training state (LoRA weights + optimizer), or the one at `checkpoint_step`
(rl_get_results lists `training_states`): its own config (session edits do not apply), the same
run name and W&B run, steps numbered on from the state's step, the environment's data going on
where it was; `total_steps` may raise the number of steps. `fork=true` starts from that state
with the session's current config instead (e.g. a lower learning_rate) and a new W&B run. The
new run is a new run id that records its parent; its metrics hold the parent's steps up to the
state, so results and curves cover every step once. A run stopped in its supervised stage goes
on with it; `checkpoint_step=0` is where its stage ended (with fork=true: RL with other settings,
the stage not trained again). Refused with the reason: a run that is still
active, a run with no saved state, a step with no state, a state of another base model or LoRA
rank.
</behaviour>

<next_step>
rl_check_status(run_id) once (it is rate-limited per run: wait the `next_check_in_seconds` it
gives), rl_stop_training(run_id) to stop, rl_get_results(run_id) when it has completed. Live
logs and metrics: resources rl://runs/{run_id}/logs/{api|trainer|env} and rl://runs/{run_id}/metrics.
</next_step>
"""

RL_CHECK_STATUS = """\
Status of one training run: progress, latest metrics, process states and recent log lines.

<returns>
status (starting, running, stopping, completed, failed, stopped, lost), the start stage or the
failing one with the error and the end of that process's log, step / total_steps, running time,
ETA, latest metrics (reward mean, loss, percent correct, held-out and validation accuracy), each
process's state and exit code, the last lines of each log, and the W&B URL when online. `findings`: what the metrics
say is wrong (no reward signal, narrowing groups, eval flat or regressing, unstable loss, drift,
a stall, groups the environment discards), each with its evidence and a ready `next_step` call;
subscribers to the run's resources also get each one once as a log message (logger
rl-mcp.diagnosis). `environment_requests`: the environment's model requests, those that outlive
the client's timeout and are retried, replies cut at their cap, and the field to change.
</returns>

<rate_limit>
Training takes a long time: checks of one active run are rate-limited (the operator sets the
interval; 30 minutes by default). A call made too soon checks nothing and answers
`rate_limited: true` with `next_check_in_seconds`. Do not poll in a loop: do other work, or
subscribe to rl://runs/{run_id}/metrics if your client supports resource subscriptions.
</rate_limit>

<next_step>
When `completed`: rl_get_results(run_id). When `failed`: read `error` and `failure_log_tail`,
fix the config with rl_edit_config, and start again. An unknown run id lists the known ones.
</next_step>
"""

RL_STOP_TRAINING = """\
Stop a training run: the environment, then the trainer (which saves its weights), then run-api.

<behaviour>
Each process gets SIGTERM and, after a grace period, SIGKILL; nothing of the run is left
running. Stopping a run that has already ended changes nothing and says so. The weights saved so
far stay on disk.
</behaviour>

<next_step>
rl_get_results(run_id) for what the run produced before it stopped.
</next_step>
"""

RL_GET_RESULTS = """\
Results of a training run: final metrics, per-step history, checkpoints, the final weights path,
and a reward and loss curve image.

<returns>
final metrics; the per-step history (reward mean/std, loss, percent correct; evenly downsampled
for long runs); evaluations: `evals` (the held-out set, before the first step and at the end) and
`validation` (every steps_per_eval steps); `checkpoint_choice`: the best checkpoint by validation
beside the last one, each with its validation and held-out accuracy; checkpoints; `final_weights`
(the weights the run hands out: its best by validation with keep_best, the default, else its last;
a tinker:// path on Tinker, an adapter folder for the local backend) and whether it exists; the
W&B summary and URL when online, else the offline W&B folder (`wandb sync <dir>` uploads it
later); `findings`, the run's diagnosis (as in rl_check_status). A PNG of the curves comes as an
image next to the structured result. Works on running runs too (partial results).
</returns>

<next_step>
Use the weights with rl_test_inference, take the model out with rl_export_model, or edit the config
and start another run.
</next_step>
"""

RL_LIST_RUNS = """\
List every training run this server knows, including runs from earlier server lifetimes.

<returns>
Newest first: run id, environment, profile, status, stage, step / total_steps, start and end
times, error. Optionally only the runs with one status.
</returns>

<next_step>
rl_check_status(run_id) or rl_get_results(run_id) for one of them.
</next_step>
"""
