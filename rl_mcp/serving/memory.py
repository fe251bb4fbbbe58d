"""What a served model costs in memory: estimated before it starts from its base model's weight files,
measured once it serves (the resident memory of its process tree), and checked against what the
machine has available (or less: RL_MCP_SERVE_MEMORY_LIMIT_BYTES) before anything starts."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from rl_mcp.processes import Child
from rl_mcp.serving.plan import ServeError, ServePlan
from tinker_atropos.models.paths import model_ref
from tinker_atropos.venvs import nvidia_gpu
from tinker_atropos.vllm_server.kv_cache import kv_cache_gb

# The inference server's Python, torch and tokenizer, whatever the model: tiny-chat (3 MB of weights)
# served at 424 MB resident, SmolLM2-135M (538 MB) at 1.57 GB (measured 2026-12-07).
SERVER_BYTES = 450 * 2**20
# The product's own sampler holds the base model and the adapter merged into a copy of it: 2x its files.
ENGINE_COPIES = 2
# vLLM's three processes beside its copy of the weights and its KV cache (vllm_server/process.py: ~1.9 GB)
VLLM_PROCESS_BYTES = 2 * 2**30
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")


@dataclass(frozen=True)
class MemoryEstimate:
    bytes: int | None  # None: the base model's weights are not on this machine to measure
    basis: str  # how it was reckoned, in words


@dataclass(frozen=True)
class MemoryRoom:
    available_bytes: int  # what the model may take: the machine's available memory, or the limit below it
    basis: str


def estimate(plan: ServePlan, environ: Mapping[str, str]) -> MemoryEstimate:
    """The served process tree's memory, reckoned from the base model's weight files."""
    if plan.sampler == "tinker":
        return MemoryEstimate(SERVER_BYTES, "the server and tokenizer only: Tinker samples the weights")
    if plan.vllm_url:
        return MemoryEstimate(
            SERVER_BYTES,
            f"the server and tokenizer only ({_gib(SERVER_BYTES)}): the adapter is loaded into the vLLM server at "
            f"{plan.vllm_url} (trainer.vllm_url), whose memory is that server's",
        )
    folder = model_folder(plan.base_model, environ)
    if folder is None:
        return MemoryEstimate(None, f"unknown: {plan.base_model}'s weights are neither a folder nor in the HF cache")
    weights = weight_files_bytes(folder)
    if plan.sampler == "vllm":
        cache = _vllm_cache_bytes(plan, environ)
        return MemoryEstimate(
            SERVER_BYTES + weights + VLLM_PROCESS_BYTES + cache,
            f"the server ({_gib(SERVER_BYTES)}) + {folder}'s weights ({_gib(weights)}) + vLLM's processes "
            f"({_gib(VLLM_PROCESS_BYTES)}) + its KV cache ({_gib(cache)}{' on the GPU' if not cache else ''})",
        )
    return MemoryEstimate(
        SERVER_BYTES + ENGINE_COPIES * weights,
        f"the server ({_gib(SERVER_BYTES)}) + {ENGINE_COPIES} x {folder}'s weights ({_gib(weights)}: the base "
        "model and the adapter merged into a copy)",
    )


def _vllm_cache_bytes(plan: ServePlan, environ: Mapping[str, str]) -> int:
    """The KV cache vLLM's own server takes in this machine's memory: sized as vllm_server/process.py sizes
    it on a CPU (VLLM_CPU_KVCACHE_SPACE where set); none here on a GPU (it is in the GPU's memory)."""
    device = str((plan.run_config.get("trainer") or {}).get("device") or "auto")
    if device == "cuda" or (device == "auto" and nvidia_gpu()):
        return 0
    raw = environ.get("VLLM_CPU_KVCACHE_SPACE", "")
    gb = int(raw) if raw.isdigit() else kv_cache_gb(int(psutil.virtual_memory().available))
    return gb * 2**30


def model_folder(base_model: str, environ: Mapping[str, str]) -> Path | None:
    """Where the base model's files are: its folder (an offline model's or a path), else its newest
    snapshot in the Hugging Face cache; None when neither is here."""
    folder = Path(model_ref(base_model)).expanduser()
    if folder.is_dir():
        return folder
    hub = environ.get("HF_HUB_CACHE") or str(Path(environ.get("HF_HOME") or Path.home() / ".cache/huggingface") / "hub")
    snapshots = Path(hub).expanduser() / f"models--{base_model.replace('/', '--')}" / "snapshots"
    found = sorted(snapshots.glob("*/"), key=os.path.getmtime) if snapshots.is_dir() else []
    return found[-1] if found else None


def weight_files_bytes(folder: Path) -> int:
    """The size of the weight files in `folder` (links followed, as the cache's snapshots are)."""
    return sum(p.stat().st_size for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())


def room(limit_bytes: int | None) -> MemoryRoom:
    """What a new served model may take now."""
    available = int(psutil.virtual_memory().available)
    if limit_bytes is not None and limit_bytes < available:
        return MemoryRoom(limit_bytes, f"RL_MCP_SERVE_MEMORY_LIMIT_BYTES ({_gib(limit_bytes)})")
    return MemoryRoom(available, f"the machine's available memory ({_gib(available)})")


def check_fits(plan: ServePlan, est: MemoryEstimate, space: MemoryRoom) -> None:
    """A ServeError with both figures when the estimate is above the room."""
    if est.bytes is not None and est.bytes > space.available_bytes:
        raise ServeError(
            f"{plan.model} would take about {_gib(est.bytes)} ({est.basis}), more than {space.basis}: nothing "
            "was started. Free memory (rl_list_served_models, rl_stop_served_model; a run in training), or "
            "serve it where there is more"
        )


def tree_rss(child: Child) -> int | None:
    """The resident memory of the child and its descendants now; None once it is gone."""
    try:
        total = psutil.Process(child.pid).memory_info().rss if child.running else None
    except psutil.Error:
        total = None
    if total is None:
        return None
    for proc in child.descendants():
        with contextlib.suppress(psutil.Error):  # one that ended meanwhile
            total += proc.memory_info().rss
    return int(total)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
