"""The guide: the rl_workflow prompt, its text, and the completions of prompt and resource arguments."""
