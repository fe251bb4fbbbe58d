"""rl_write_mcp_tasks: tasks for one of the user's MCP tool servers; the tool, its answer and its prose."""
