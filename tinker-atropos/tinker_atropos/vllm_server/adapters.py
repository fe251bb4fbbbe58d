"""Each step's LoRA adapter loaded into vLLM at runtime under a versioned name, as TRL's async trainer
and SkyRL do: requests in flight keep the name they started with, new ones take the newest, and an
adapter older than the run's staleness window is unloaded (vLLM holds `max_loras` at once).
"""

from __future__ import annotations

import logging
from collections import deque

from tinker_atropos.vllm_server.process import VllmError
from tinker_atropos.vllm_server.sampler import VllmClient, VllmSampler

logger = logging.getLogger(__name__)


class LoadedAdapters:
    """The adapters this run loaded into one vLLM server, newest last; at most `keep` stay loaded."""

    def __init__(self, client: VllmClient, prefix: str, keep: int, max_model_len: int) -> None:
        self.client = client
        self.prefix = prefix  # the run's name: runs sharing a server never share an adapter name
        self.keep = keep
        self.max_model_len = max_model_len
        self.loaded: deque[str] = deque()
        self.pinned: list[str] = []

    async def serve(self, path: str, label: str, *, pinned: bool = False) -> VllmSampler:
        """Load the adapter folder at `path` as `<prefix>-<label>` and sample with it; a `pinned` one (a
        teacher) stays loaded until unload_all."""
        name = f"{self.prefix}-{label}"
        response = await self.client.post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})
        if response.status_code != 200:
            text = response.text[:500]
            if response.status_code == 404:  # vLLM's NotFoundError: "No adapter found for <path>"
                raise VllmError(
                    f"vLLM's server at {self.client.url} cannot read the adapter folder {path}: a server elsewhere "
                    f"must see this machine's files at the same path (a shared folder); its answer: {text}"
                )
            raise VllmError(f"vLLM's server at {self.client.url} could not load adapter {path}: {text}")
        if pinned:
            self.pinned.append(name)
            return VllmSampler(self.client, name, self.max_model_len, path)
        self.loaded.append(name)
        while len(self.loaded) > self.keep:
            await self.unload(self.loaded.popleft())
        return VllmSampler(self.client, name, self.max_model_len, path)

    async def unload(self, name: str) -> None:
        response = await self.client.post("/v1/unload_lora_adapter", {"lora_name": name})
        if response.status_code != 200:  # a leftover slot costs memory, not correctness
            logger.warning("vLLM did not unload adapter %s: %s", name, response.text[:300])

    async def unload_all(self) -> None:
        while self.loaded:
            await self.unload(self.loaded.popleft())
        while self.pinned:
            await self.unload(self.pinned.pop())
