"""rl_serve_model, rl_list_served_models, rl_stop_served_model: the tools and their descriptions (their
answers: rl_mcp/serving/answers.py)."""
