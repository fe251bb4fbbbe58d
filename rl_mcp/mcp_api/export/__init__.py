"""rl_export_model: the tool, its answer, the view that builds it and its prose."""
