"""rl_export_model: the tool and its description (its answer: rl_mcp/export/answers.py)."""
