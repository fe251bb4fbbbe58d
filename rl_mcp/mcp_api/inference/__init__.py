"""rl_test_inference: the tool, its answer, the view that builds it and its prose."""
