"""rl_write_mcp_tasks: tasks for one of the user's MCP tool servers; the tool and its description."""
