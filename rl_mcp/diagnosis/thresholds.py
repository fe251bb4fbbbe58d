"""The thresholds of the diagnosis rules (rules.py), each with why it has its value.

Steps are compared in windows: the run's first steps against its latest ones, so that one noisy
step (a small batch on a small model) neither fires nor hides a finding.
"""

from __future__ import annotations

# A window is this share of the steps so far: long runs compare longer stretches.
WINDOW_SHARE = 0.25
# At least this many steps a window: fewer is one batch's noise.
MIN_WINDOW_STEPS = 3
# At most this many: a trend over the latest ten steps is still the latest trend.
MAX_WINDOW_STEPS = 10
# Trends (early vs recent) need two windows that do not overlap.
MIN_TREND_STEPS = 2 * MIN_WINDOW_STEPS

# All-equal groups in nearly every group from the first steps on: the reward gives no signal at all.
FLAT_NO_SIGNAL_SHARE = 0.9
# More than half of the recent groups give no signal: most of each step's batch trains nothing.
NARROWING_NO_SIGNAL_SHARE = 0.5
# Distinct replies at or below half of each group: the policy samples the same few replies.
COLLAPSED_DISTINCT_SHARE = 0.5
# ... and that share fell by this much since the first steps (a task with short fixed answers
# starts low; only a fall is narrowing).
DISTINCT_FALL = 0.2
# ... or the entropy per sampled token fell to this share of the first steps' or below: replies too
# long to repeat exactly collapse too. letter_repeat at lr 1e-3 fell from 5.1 to 0.14 nats (3%);
# the healthy SmolLM2 run from 1.8 to 0.53 (30%), a policy growing surer of its answers.
COLLAPSED_ENTROPY_SHARE = 0.1
# Fewer distinct replies is a policy that found its answer when the latest steps earn at least this
# reward (rewards in [0, 1]; the overfitting run's two items at 0.99); below it the few replies left
# are not the right ones (the collapses on letter_repeat: one letter whatever the prompt, 0.43-0.68).
CONVERGED_REWARD = 0.9
# The share of groups without signal rose by this much since the first steps: narrowing whatever
# the reward (groups that stopped giving a signal train nothing).
NO_SIGNAL_RISE = 0.25
# Temperature raised by this step: enough to widen a narrowing group, not enough to make it noise.
TEMPERATURE_STEP = 0.3
# Recent reward above this: all-equal groups are mostly all right (suggest harder items), else
# mostly all wrong (easier items).
MOSTLY_RIGHT_REWARD = 0.5
# group_size never suggested above this: the environments' own bound.
MAX_GROUP_SIZE = 64

# The training reward rose by this much (rewards in [0, 1]): a real gain, not batch noise.
REWARD_RISE = 0.1
# Held-out eval gained less than this share of the training reward's gain: what training learned
# does not carry to held-out items (a learning run's eval follows most of the way).
EVAL_FOLLOW_SHARE = 0.25

# A quoted sample reply is cut here: enough to see what the reward pays for, short enough to read.
QUOTED_REPLY_CHARS = 200

# A held-out eval this far below the run's best: a regression worth keeping the best checkpoint for
# (one item of a 12-item eval set is 0.083, so one flipped item does not fire).
EVAL_REGRESSION_DROP = 0.1
FALL_EVALUATIONS = 2  # evaluations after the best, the last two of them below it by the drop: a fall that holds

# A gradient norm in the latest steps this many times the median of the steps before it: the
# updates blow up now (a warning; a learning run's norm falls as it converges).
GRAD_NORM_EXPLOSION = 10.0
# A gradient norm this many times the median of the steps before it, at any step: a spike, reported
# (info) also once it passed. The healthy SmolLM2 run's steps stay within 2x of theirs, the tiny
# model's first steps within 1.9x; letter_repeat at lr 1e-3 climbed to 5.3x (129 at step 6) before
# its replies collapsed, the overfitting run jumped 20x.
GRAD_NORM_SPIKE = 4.0
# A learning rate cut by this factor: an order of magnitude, the usual first step when updates blow up.
LEARNING_RATE_CUT = 0.1

# Mean |trainer logprob - sampler logprob| per token above this: importance ratios of exp(0.2) =
# 1.22 or below 0.82 on a typical token, beyond PPO's usual clip range of 0.2. Over the latest steps
# a warning; over MIN_WINDOW_STEPS steps that passed, info (the episode: the neighbouring steps above it).
DRIFT_WARN = 0.2
# sampler_mismatch (trainer.sampler vllm: vLLM and the trainer scoring the same tokens with the same weights):
# 0.005 nats a token on tiny-chat (bfloat16 kernels against float32). A recent window at MISMATCH_WARN or
# above that is MISMATCH_GROWTH times the first window's is a sampler drifting off the trained policy
MISMATCH_WARN = 0.05
MISMATCH_GROWTH = 2.0
# teacher_kl (trainer.teacher): a recent window above TEACHER_KL_FALL x the first window's has not fallen,
# unless it is under TEACHER_KL_CLOSE already (the student samples nearly as the teacher would)
TEACHER_KL_FALL = 0.9
TEACHER_KL_CLOSE = 0.02

# The environment discarded this many groups in a row (returned none, raising nothing): more than
# a chance run of all-equal groups, early enough to read before the run fails on it (settings'
# RL_MCP_ENV_DISCARD_GROUPS, 20 by default).
DISCARDED_IN_A_ROW = 5

# A step is late when no line came for this many typical step times ...
STALL_FACTOR = 5.0
# ... and for at least this long (short steps jitter by seconds on a shared machine).
STALL_MIN_SECONDS = 120.0
# No first step this long after the run began: a start that hangs (the model, rollouts, run-api).
FIRST_STEP_STALL_SECONDS = 900.0
# Recent steps this many times slower than the first ones: throughput dropped.
SLOWDOWN_FACTOR = 3.0
# ... and slower by at least this many seconds (a 0.1 s step that takes 0.4 s is no drop to act on).
SLOWDOWN_MIN_SECONDS = 5.0

# The supervised stage (sft) ended with at most this held-out share of rollouts that make a
# well-formed tool call: it did not teach the call (SmolLM2 cold: 0 of 16).
SFT_NO_CALLS_SHARE = 0.05
# The stage's loss fell to at most this share of its first step's, while the held-out accuracy
# did not rise: the examples were learned, the task was not (memorized).
SFT_LOSS_FELL_TO = 0.5
# The stage left the held-out accuracy at least this high, and at least this share of the RL
# groups its environment scored (of at least SFT_SOLVED_MIN_GROUPS) never reached the trainer:
# every reply of a group scored the same, and RL waits for the rare group with a spread
# (bench/sft.py on tool_calculator: 1.00 after the stage, 205 of 209 groups dropped, 6-9 min a step).
SFT_SOLVED_ACCURACY = 0.9
SFT_SOLVED_DROPPED_SHARE = 0.75
SFT_SOLVED_MIN_GROUPS = 16
# Ties at one end of the reward, at the top (tie_rules.items_solved: the items are solved) or at zero
# (rules.no_reward_signal: nothing pays): at least this many groups tied there, and they are this share
# of the groups that tied or more. The mcp:time run after a stage that solved its items had every group
# tie at 1.0; a run learning its items ties at both ends.
ONE_END_MIN_TIES = 4
ONE_END_TIE_SHARE = 0.8
# ... and the ties were at least this share of the groups scored: nearly all the rollouts taught nothing.
# Not half: bench/item_signal.py's mcp:time run after a stage tied 32 of 46 groups, 29 at the top, while
# the other 30% still had a spread (7 RL steps); "stop and export" was premature there. After a stage
# that solved tool_calculator, 200 of 207 tied.
SOLVED_TIED_GROUPS_SHARE = 0.8
# Of the groups tied at zero, at least this share had every reply's actions refused (items.json
# `zero_refused`): no_reward_signal names the cause "no valid action", not a reward that never pays.
REFUSED_ZERO_TIE_SHARE = 0.8
