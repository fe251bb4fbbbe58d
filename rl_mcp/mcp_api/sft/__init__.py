"""The supervised stage's tool: rl_preview_sft (what the stage would train on, before a run)."""
