"""Everything MCP-facing, one folder per tool family (its tools beside their descriptions) beside the
modules they share; server.py lists the families. The answers are the domain rooms'."""
