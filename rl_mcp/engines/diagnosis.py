"""Why an engine did not start or died, read from the tail of its log, with the fix (pure)."""

from __future__ import annotations

from pathlib import Path

OOM_FIX = (
    "lower the engine's memory in the profile's `engine.backend_config` (or RL_MCP_ENGINE_BACKEND_CONFIG, JSON): "
    '{"train_micro_batch_size": 1, "sample_max_num_sequences": 4, "max_lora_adapters": 3}, and shorter '
    "sequences (max_token_length)"
)
# (what the log says, what it means and what to do), first match wins
_CAUSES = (
    (
        ("exit code -9", "Killed", "MemoryError", "RESOURCE_EXHAUSTED", "Out of memory"),
        f"it ran out of memory: {OOM_FIX}",
    ),
    (
        ("None of the architectures", "is currently supported"),
        "it cannot load this base model (SkyRL serves Llama and Qwen3 architectures): choose another model",
    ),
    (
        ("Failed to spawn", "No such file or directory: 'uv'", "No module named 'skyrl"),
        "its venv is incomplete: run `make skyrl-engine` again (or set RL_MCP_SKYRL_VENV)",
    ),
    (("address already in use", "Errno 98"), "its port is taken by another process: restart the server"),
    (
        ("Maximum number of LoRA adapters", "max_lora_adapters"),
        "every adapter slot is in use (one per run, fork or test): stop a run, or raise max_lora_adapters "
        "in `engine.backend_config`",
    ),
)
TAIL_LINES = 12


def explain_exit(what: str, tail: list[str], log_path: Path) -> str:
    """`what` happened, its likely cause and fix, and the log's last lines."""
    text = "\n".join(tail)
    cause = next((meaning for needles, meaning in _CAUSES if any(n in text or n in what for n in needles)), None)
    last = "\n".join(line.rstrip() for line in tail[-TAIL_LINES:] if line.strip())
    parts = [what + (f": {cause}" if cause else "")]
    parts.append(f"engine log {log_path}" + (f", last lines:\n{last}" if last else " is empty"))
    return ". ".join(parts[:1]) + "\n" + parts[1]
