"""A run's weights served on this machine for other programs (rl_serve_model, `mcp-server-rl serve-model`)."""
