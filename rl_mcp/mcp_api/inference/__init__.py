"""rl_test_inference: the tool and its description (its answer: rl_mcp/inference/answers.py)."""
