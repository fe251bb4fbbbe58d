"""Entry points of the short-lived child processes the server runs (`python -m rl_mcp.children.X`).

They import environment code and atroposlib, which the server itself never does."""
