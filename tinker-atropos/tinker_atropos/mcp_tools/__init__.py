"""The `mcp` environment format: the user's own MCP tool servers as environments (docs/mcp-tools.md).

`servers_file`, `tool_policy`, `tasks` and `checks` are standard library only (the server reads them);
`sessions`, `probe`, `judge` and the environment speak MCP and HTTP in child processes.
"""
