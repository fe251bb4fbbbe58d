"""OpenEnv environments, driven over their own WebSocket protocol: nothing here imports `openenv`.
Their servers run on a venv of their own (`make openenv`), started by `serve.py` in that venv."""

# the share of an OpenEnv run's episodes that the environment ended (`done`), in each metrics line's
# `env_metrics`: the server's diagnosis reads it (a server that never says `done`)
EPISODE_DONE = "openenv_episode_done"
