"""What each tool says to the agent (its description and annotations).

Every description says what the tool does, when to call it, what comes back, and what to call
next, so an agent can walk the whole workflow from the tool list alone.
"""

from mcp.types import ToolAnnotations


def tool_annotations(title: str, *, read_only: bool, destructive: bool, idempotent: bool) -> ToolAnnotations:
    """Every hint set explicitly: clients decide on confirmation prompts from these."""
    return ToolAnnotations(
        title=title,
        read_only_hint=read_only,
        destructive_hint=destructive,
        idempotent_hint=idempotent,
        open_world_hint=False,
    )


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
Runs keep going when the client disconnects; rl_list_runs shows them all, and
rl_compare_runs puts two to eight of them side by side.
"""

RL_LIST_ENVIRONMENTS = """\
List the RL environments available for training (Atropos BaseEnv subclasses, Hermes agent
environments, reasoning-gym's procedural tasks, verifiers environments: classic and v1).

<when_to_use>
Start here. Call it to see what can be trained, or to check a custom environment was found
(custom environments come from the directories in RL_MCP_ENV_DIRS).
</when_to_use>

<returns>
Each environment's `name` (what rl_select_environment takes), class, file, one-line description,
config class and `format` (atropos, hermes, verifiers, verifiers-v1, mcp); `task_catalogs`: families
of tasks listed by name only, each task an environment of its own (reasoning-gym's: select
`reasoning_gym:<task>`, e.g. reasoning_gym:leg_counting); which one is selected now; names
shadowed by an earlier directory; files that could not be parsed (a syntax error is reported
here and the file is skipped). Nothing is imported or run: files are only parsed. `tool_servers`:
the user's MCP tool servers (from the tool-servers file, `tool_servers_file`: Claude Desktop's
`mcpServers` JSON; RL_MCP_TOOL_SERVERS names another, e.g. the client's own config), each an
environment `mcp:<server>` with its tools (names, descriptions, input schemas, annotations, which are
enabled by default), read from the server itself; a server that cannot start has its `error`.
</returns>

<next_step>
rl_select_environment(name) with one of the names; to train on a tool server, write its tasks first
with rl_write_mcp_tasks. The source of any environment is readable as
the resource rl://environments/{name}.
</next_step>
"""

RL_SELECT_ENVIRONMENT = """\
Select the environment to configure, test and train.

<when_to_use>
After rl_list_environments, before editing the config or starting training.
</when_to_use>

<behaviour>
Loads the environment's config fields in a separate short-lived process (the first time may take
a few seconds; later selections are cached). Sets `wandb_name` to `{env}-{timestamp}` and clears
any edits made for the previously selected environment. If the environment fails to import, the
answer is an error with the end of its traceback and the previous selection stays as it was.
The selection and edits survive a server restart.
</behaviour>

<returns>
The full config view (same as rl_get_current_config): every field with its value, type,
constraints, and status (locked by the operator's profile, editable, or managed per run).
</returns>

<next_step>
Adjust editable fields with rl_edit_config, then check the environment with rl_test_inference
before rl_start_training.
</next_step>
"""

RL_GET_CURRENT_CONFIG = """\
Show the selected environment's configuration as a run started now would use it.

<when_to_use>
To review values before testing or training, or to see which fields can be edited and their
bounds. Read-only and cheap.
</when_to_use>

<returns>
The active profile (backend, model, locked values), every config field (section `env` for the
environment, `tinker` for training, `verifiers` for a verifiers environment's own arguments) with
its value, default, type, constraints and status:
`locked` (operator's profile, cannot be edited), `managed` (set per run: ports, run directory),
`edited` (your edit), `profile_default` / `default`, `selection` (wandb_name). `generation_cap`:
where a field asks for more tokens a reply than the model's context holds, the per-turn cap the
inference server applies instead (`max_reply_tokens`). Errors if no environment is selected.
</returns>

<next_step>
rl_edit_config to change an editable field; rl_test_inference or rl_start_training when ready.
</next_step>
"""

RL_EDIT_CONFIG = """\
Change one editable config field of the selected environment, or reset edits to defaults.

<usage>
- Set:  rl_edit_config(field="group_size", value=16)
- Reset one field:  rl_edit_config(field="group_size", reset=true)
- Reset every edit: rl_edit_config(reset=true)
</usage>

<rules>
The value is checked against the field's type and bounds before it is stored (see
`constraints` in rl_get_current_config). A rejected edit changes nothing and the error says what
was expected. Fields locked by the operator's profile (e.g. the model and token lengths on
Tinker) and fields the server sets per run cannot be edited: the error names the locked value.
Edits apply to runs started afterwards, never to a run already going.
</rules>

<next_step>
rl_get_current_config to review, then rl_test_inference or rl_start_training.
</next_step>
"""

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
disconnects.

Resume and fork: `resume_from=<run_id>` continues that (stopped, failed, lost or completed) run
from its latest saved training state (LoRA weights + optimizer), or the one at `checkpoint_step`
(rl_get_results lists `training_states`): its own config (session edits do not apply), the same
run name and W&B run, steps numbered on from the state's step, the environment's data going on
where it was; `total_steps` may raise the number of steps. `fork=true` starts from that state
with the session's current config instead (e.g. a lower learning_rate) and a new W&B run. The
new run is a new run id that records its parent; its metrics hold the parent's steps up to the
state, so results and curves cover every step once. Refused with the reason: a run that is still
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
ETA, latest metrics (reward mean, loss, percent correct, eval accuracy), each process's state and
exit code, the last lines of each log, and the W&B URL when online. `findings`: what the metrics
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
for long runs); evaluations; checkpoints; `final_weights` (a tinker:// path on Tinker, an adapter
folder for the local backend) and whether it exists; the W&B summary and URL when online, else
the offline W&B folder (`wandb sync <dir>` uploads it later); `findings`, the run's diagnosis
(as in rl_check_status). A PNG of the curves comes as an image next to the structured result.
Works on running runs too (partial results).
</returns>

<next_step>
Use the weights with rl_test_inference, take the model out with rl_export_model, or edit the config
and start another run.
</next_step>
"""

RL_EXPORT_MODEL = """Take a run's trained model out of rl-mcp, in a form other programs load: a PEFT adapter
(`adapter`), a merged transformers model (`merged`), or a single GGUF file with an Ollama Modelfile
(`gguf`, for llama.cpp and Ollama; llama-type models such as SmolLM2).

<when_to_use>
After a run (or during one, for a saved checkpoint) when the person wants to use the model
elsewhere: Hermes with a local model, Ollama, llama.cpp, transformers, or the Hugging Face Hub.
</when_to_use>

<what_it_does>
Picks the checkpoint (`best` by held-out eval where the run has evaluations, else `final`, or a
step), converts it in a child process with progress notifications, loads the export back and
checks that its greedy replies to the environment's own prompts equal the trained policy's
(adapter and merged float32: all; lossy dtypes: at least half), writes a README.md model card with
the reward curve, and with `hub_repo` pushes the folder to the Hub (token from HF_TOKEN, never
echoed). Tinker runs: the weights are exported by Tinker from the run's saved training state and
downloaded first (needs TINKER_API_KEY and the network); a self-hosted engine's runs: the
checkpoint's archive is downloaded from the engine (which must be running; no key).
</what_it_does>

<returns>
The folder, its files and sizes, the command to load it, the check's figures, the model card's
path, and the Hub URL when pushed.
</returns>
"""

RL_COMPARE_RUNS = """\
Compare two to eight training runs side by side: which config fields differ, how each trained,
and which run is best.

<when_to_use>
After runs that differ in a setting (a learning rate, a group size, a fork), to decide which to
keep, export or continue. Works on running runs too (their figures so far).
</when_to_use>

<returns>
`config_differences`: each config.yaml field (dotted, e.g. tinker.learning_rate) whose values
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

RL_TEST_INFERENCE = """\
Try the selected environment against real inference before training: it samples `num_steps`
groups of `group_size` completions per model and scores them with the environment's own reward.

<when_to_use>
After rl_select_environment / rl_edit_config and before rl_start_training, to check that the
environment loads, its prompts make sense and its rewards vary (a group whose completions all
score the same gives no learning signal). Also to compare models on the task, and after training
to check what a run learned: `run_id` (and optionally `checkpoint_step`) tests that run's weights.
</when_to_use>

<targets>
- base_url given (any OpenAI-compatible endpoint, e.g. http://host:8000/v1): `models` lists the
  model names it serves; `api_key_env` names the environment variable that holds its key (the
  key itself is never an argument).
- no base_url and OPENROUTER_API_KEY set on the server: OpenRouter, with `models` or by default
  qwen/qwen3-8b, z-ai/glm-4.7-flash and minimax/minimax-m2.5, a few in parallel.
- neither, on the local profile (or target="local" on any profile): this machine's own inference
  server with the local model, started for the test and stopped after it (works offline; real
  tokens and logprobs, as training sees them).
- neither, on a remote profile (tinker): an error naming the three ways forward (set
  OPENROUTER_API_KEY, pass base_url, or pass target="local"); never a silent local test.
- run_id given: a run's trained weights (its newest checkpoint, or `checkpoint_step`'s) and its
  base model, both on this machine's inference server (a Tinker run's weights are sampled on
  Tinker; a self-hosted engine's run's are downloaded from the engine and sampled here), side by
  side on the same environment; `run_comparison` gives both accuracies and the difference.
`target` ("local", "openrouter", "base_url") picks one explicitly.
</targets>

<behaviour>
Runs the environment's atroposlib `process` mode once per model in its own process, with a fresh
output folder each time; `timeout_s` bounds the whole call (all models; default 270 s, under
Hermes' default 300 s tool timeout): models still running then stop and report `timeout` with
what they scored. Sends a progress notification after each scored group when the client asked
for progress, and every 5 s while none comes: tokens generated so far, requests in flight,
replies cut at their cap, groups discarded. An environment whose rollouts only raise is stopped
after 20 s (`failed`); one that discards every group it rolls out (returns none, raising nothing,
as Atropos' own do when all scores are equal) after RL_MCP_ENV_DISCARD_GROUPS in a row or
RL_MCP_ENV_DISCARD_TIMEOUT seconds (`discarded`). Takes seconds to minutes: the local tiny model
on a CPU needs about half a minute for a few small groups. Keys travel only as environment
variables: never in arguments, files, logs or this answer. W&B is off unless WANDB_API_KEY is set.
</behaviour>

<returns>
Per model: status, steps_tested, completions, correct, accuracy, step_success_rate, mean_score,
step_scores, real_logprobs, two samples (best and worst), and the paths of the scored-groups
JSONL, its HTML rendering, the log and the config; on failure the error and the log's last lines.
`discarded`: the groups the environment threw away, sample replies, their scores where the
environment records them, and the likely cause. `replies_at_cap`: replies cut at their token cap or
the model's context, and the config field that caps them.
Summary: best_model, mean_accuracy, environment_working. An unreachable endpoint, a missing key
or an environment that no longer imports is an error that says what to fix.
</returns>

<next_step>
environment_working: rl_start_training. Otherwise read error / log_tail, fix, and test again.
</next_step>
"""
