"""rl_compare_runs: the tool, its answer, the view that builds it and its prose."""
