"""vLLM's OpenAI server as the local backend's sampler (`trainer.sampler: vllm`).

vLLM lives in a runtime of its own (`mcp-server-rl setup vllm`: its transformers pin is not the
product's), so nothing here imports it: `process.py` starts its server (under `guard.py`, which takes
its engine processes down with it), `adapters.py` loads each step's LoRA adapter into it at runtime,
`sampler.py` is a `SamplingBackend` over its HTTP API. The product's inference server stays in front
(every request shape environments ask for, the reply cap, tool-call parsing): only the tokens come
from vLLM.
"""
