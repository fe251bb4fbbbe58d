#!/usr/bin/env bash
# Drive rl-mcp with the MCP Inspector (npm @modelcontextprotocol/inspector).
#
#   examples/inspector.sh        # CLI mode: tools/list, rl_list_environments, rl://profile
#   examples/inspector.sh ui     # the Inspector web UI on localhost (opens a browser)
#   examples/inspector.sh --method tools/call --tool-name rl_select_environment \
#       --tool-arg name=letter_repeat      # any other Inspector CLI arguments pass through
#
# The server is `.venv/bin/rl-mcp serve` over stdio; its state lives in $RL_MCP_HOME
# (default ~/.rl-mcp). The Inspector hands its own environment to the server, so keys
# (TINKER_API_KEY, WANDB_API_KEY, OPENROUTER_API_KEY) reach it from your shell by name only:
# never put them on this command line, where `ps` would show them.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
RL_MCP="$ROOT/.venv/bin/rl-mcp"
[ -x "$RL_MCP" ] || { echo "no $RL_MCP: run 'make install' in $ROOT first" >&2; exit 1; }

if [ -x "$ROOT/.ci/node/node_modules/.bin/mcp-inspector" ]; then
  INSPECTOR=("$ROOT/.ci/mcp-inspector")   # `make inspector` installs it, with the Node 22 it needs
else
  INSPECTOR=(npx -y @modelcontextprotocol/inspector)
fi
export RL_MCP_HOME="${RL_MCP_HOME:-$HOME/.rl-mcp}"
export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}"

if [ "${1:-}" = "ui" ]; then
  exec "${INSPECTOR[@]}" "$RL_MCP" serve
elif [ $# -gt 0 ]; then
  exec "${INSPECTOR[@]}" --cli "$RL_MCP" serve "$@"
fi
"${INSPECTOR[@]}" --cli "$RL_MCP" serve --method tools/list
"${INSPECTOR[@]}" --cli "$RL_MCP" serve --method tools/call --tool-name rl_list_environments
"${INSPECTOR[@]}" --cli "$RL_MCP" serve --method resources/read --uri rl://profile
