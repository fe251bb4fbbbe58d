"""The size of vLLM's KV cache on a CPU (VLLM_CPU_KVCACHE_SPACE, GB), from the memory free when its server
starts. Stdlib only: the MCP server reckons a served model's memory (rl_mcp/serving/memory.py) from the
same rule the server is started with (process.py)."""

from __future__ import annotations

# The cache is this share of the memory free at the start, within these bounds (GB): the trainer's model,
# optimizer and passes need the rest (bench/README.md measures a step's peak)
KV_CACHE_SHARE = 0.15
KV_CACHE_GB = (1, 8)


def kv_cache_gb(available_bytes: int) -> int:
    """The KV cache's size on a CPU, from the memory free when the run starts."""
    low, high = KV_CACHE_GB
    return max(low, min(high, int(available_bytes * KV_CACHE_SHARE / 2**30)))
