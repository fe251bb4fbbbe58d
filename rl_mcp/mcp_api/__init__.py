"""Everything MCP-facing, one folder per tool family (its tools, answer models, views and prose)
beside the modules they share; server.py lists the families."""
