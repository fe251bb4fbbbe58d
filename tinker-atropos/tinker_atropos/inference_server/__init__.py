"""The inference server: OpenAI, sglang and vllm endpoints over the live (newest) sampler.

launch.py: `holder = SamplerHolder(); handle = serve_in_thread(build_app(holder, name, tok),
host, port)`, then `holder.swap(sampler)` after every step and `handle.stop()` at the end.
Standalone: `python -m tinker_atropos.inference_server --config X.yaml [--adapter PATH]`.
"""

from tinker_atropos.inference_server.app import build_app
from tinker_atropos.inference_server.holder import SamplerHolder, SamplerNotReady
from tinker_atropos.inference_server.serve import PortBindError, ServerHandle, serve_in_thread

__all__ = [
    "PortBindError",
    "SamplerHolder",
    "SamplerNotReady",
    "ServerHandle",
    "build_app",
    "serve_in_thread",
]
