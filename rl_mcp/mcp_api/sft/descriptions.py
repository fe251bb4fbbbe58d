"""What rl_preview_sft says to the agent: its description
(the next step an answer suggests is built with the answer, in its domain room)."""

from __future__ import annotations

RL_PREVIEW_SFT = """Build the supervised set of the selected agent environment's `sft` section and show it
before any training: what a run's supervised stage (stage `sft`, before RL, on the same LoRA
adapter) would train on.

<when_to_use>
An agent environment whose model never writes a tool call by itself: rl_test_inference shows 0
tool calls per rollout, eval_tool_call_share stays 0, or rl_check_status has the `no_tool_calls`
finding. GRPO cannot fix that (every rollout scores the same, every group is dropped); a short
supervised stage first can, as verifiers, prime-rl, tinker-cookbook, ART and Unsloth all do for
small models. Set the section with rl_edit_config(field='sft', value={...}), preview it here, then
rl_start_training: the run trains the stage, then RL.
</when_to_use>

<what_it_does>
Runs the stage's own process with the selection's config: `demonstrations` plays the environment's
demonstration(item) for `items` training items through its real tools and keeps those whose reward
reaches `min_score`; `file` reads a JSONL of conversations (OpenAI `messages` with tool_calls, or
ShareGPT `conversations` as Hermes' trajectory files have them) and renders each with this
environment's own tools and chat template, refusing a line that calls a tool the environment does
not offer, passes arguments its schema refuses, poses a held-out evaluation item, or does not fit
the context; `hermes_sessions` reads the user's own Hermes sessions (`hermes sessions export FILE
--format jsonl`, field `sessions_file`) the same way, after masking secrets by Hermes' export rules,
and leaves out sessions that failed in Hermes unless `include_failed`. Then loads the model and
times one training step (local backend). Trains nothing.
</what_it_does>

<returns>
Examples kept and refused per source, the refusals with their line or item and why, one example
rendered with its mask (`trained` spans are what the policy learns to write; system, user and
tool text weigh nothing), the tokens, the stage's steps and its estimated time; for
`hermes_sessions`, the sessions kept, failed and left out, refused (each with why) and the secrets
redacted.
</returns>
"""
