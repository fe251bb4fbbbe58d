"""A run's trained weights out of rl-mcp: a PEFT adapter, a merged transformers model or a GGUF
file, each checked against the trained policy before it is reported done (`python -m
tinker_atropos.export`, a child process of the server: it imports torch)."""
