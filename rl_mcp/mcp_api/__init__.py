"""Everything MCP-facing: tools, resources, subscriptions, answer models and their prose."""
