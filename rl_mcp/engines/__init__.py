"""Self-hosted Tinker-API engines the server starts, watches and stops (SkyRL's), or attaches to."""
