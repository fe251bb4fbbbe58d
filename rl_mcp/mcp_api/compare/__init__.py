"""rl_compare_runs: the tool and its description (its answer: rl_mcp/runs/compare_answers.py)."""
