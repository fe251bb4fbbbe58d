"""What rl_test_inference says to the agent: its description
(the next step an answer suggests is built with the answer, in its domain room)."""

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
