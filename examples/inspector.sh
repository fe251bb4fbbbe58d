#!/usr/bin/env bash
# Drive rl-mcp with the MCP Inspector (npm @modelcontextprotocol/inspector).
#
#   examples/inspector.sh        # CLI mode: tools/list, rl_list_environments, rl://profile
#   examples/inspector.sh ui     # the Inspector web UI on localhost (opens a browser)
#   examples/inspector.sh --method tools/call --tool-name rl_select_environment \
#       --tool-arg name=letter_repeat      # any other Inspector CLI arguments pass through
#
# The server is `uvx mcp-server-rl serve` over stdio (the package from PyPI), or in a checkout after `make
# install` its `.venv/bin/mcp-server-rl serve` (RL_MCP_FROM=uvx|checkout picks one); its state lives in $RL_MCP_HOME
# (default ~/.rl-mcp). Inspector 2.x hands the server almost none of your shell's environment,
# so this script passes the non-secret settings with -e. Keys (TINKER_API_KEY, WANDB_API_KEY,
# OPENROUTER_API_KEY) must never go on a command line, where `ps` shows them: put them in a
# chmod 600 file of KEY=value lines and name it in RL_MCP_KEYS_FILE; the server's launcher
# sources it. Without keys the server runs on the local profile.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
if [ "${RL_MCP_FROM:-}" = uvx ] || { [ "${RL_MCP_FROM:-}" != checkout ] && [ ! -x "$ROOT/.venv/bin/mcp-server-rl" ]; }; then
  RL_MCP=(uvx mcp-server-rl)
else
  RL_MCP=("$ROOT/.venv/bin/mcp-server-rl")
  [ -x "${RL_MCP[0]}" ] || { echo "no ${RL_MCP[0]}: run 'make install' in $ROOT first" >&2; exit 1; }
fi

if [ -x "$ROOT/.ci/node/node_modules/.bin/mcp-inspector" ]; then
  INSPECTOR=("$ROOT/.ci/mcp-inspector")   # `make inspector` installs it, with the Node 22 it needs
else
  INSPECTOR=(npx -y @modelcontextprotocol/inspector)
fi
ENVS=(-e "RL_MCP_HOME=${RL_MCP_HOME:-$HOME/.rl-mcp}" -e "HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}")
for name in RL_MCP_PROFILE RL_MCP_ENV_DIRS RL_MCP_KEYS_FILE; do
  [ -n "${!name:-}" ] && ENVS+=(-e "$name=${!name}")
done
# The server command: load the keys file (if any) into the server's own environment, then serve.
SERVER=(bash -c 'if [ -n "${RL_MCP_KEYS_FILE:-}" ]; then set -a; . "$RL_MCP_KEYS_FILE"; set +a; fi; exec "$0" "$@" serve' "${RL_MCP[@]}")

if [ "${1:-}" = "ui" ]; then
  exec "${INSPECTOR[@]}" "${ENVS[@]}" "${SERVER[@]}"
elif [ $# -gt 0 ]; then
  exec "${INSPECTOR[@]}" --cli "${ENVS[@]}" "${SERVER[@]}" "$@"
fi
"${INSPECTOR[@]}" --cli "${ENVS[@]}" "${SERVER[@]}" --method tools/list
"${INSPECTOR[@]}" --cli "${ENVS[@]}" "${SERVER[@]}" --method tools/call --tool-name rl_list_environments
"${INSPECTOR[@]}" --cli "${ENVS[@]}" "${SERVER[@]}" --method resources/read --uri rl://profile
