"""rl_export_model and `mcp-server-rl export`: which checkpoint, where, the child process that converts and
checks it, and the model card (torch-free: the conversion runs in `python -m tinker_atropos.export`)."""
