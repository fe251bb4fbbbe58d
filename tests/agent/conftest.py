"""Agent-test fixtures: the real inference server (in a thread) over a sampler whose replies a
test scripts per turn, so tool-call paths are exercised exactly through HTTP and atroposlib."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from agent_helpers import ScriptedSampler

from tinker_atropos.models import ensure_model

MODEL = "tiny-chat"


@pytest.fixture(scope="session")
def tiny_path() -> Path:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return ensure_model(MODEL)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_path))


@pytest.fixture(scope="session")
def scripted_server(tiny_tokenizer) -> Iterator[tuple[str, ScriptedSampler]]:
    """(url, sampler) of a real inference server whose policy is a ScriptedSampler."""
    from tinker_atropos.inference_server import SamplerHolder, build_app, serve_in_thread

    sampler = ScriptedSampler(tiny_tokenizer)
    handle = serve_in_thread(build_app(SamplerHolder(sampler), MODEL, tiny_tokenizer), "127.0.0.1", 0)
    yield handle.url, sampler
    handle.stop()


@pytest.fixture(scope="module")
def smollm2_url() -> Iterator[str]:
    """A real inference server over untrained SmolLM2-135M-Instruct (a cold policy that writes text)."""
    from tinker_atropos.backends.local import create_sampler, load_base_model
    from tinker_atropos.inference_server import SamplerHolder, build_app, serve_in_thread

    try:  # built from its wheel on first use, as a run builds it: an empty HOME has no build yet
        ensure_model("smollm2-135m")
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        pytest.skip(f"{exc} (make smollm2)")
    base = load_base_model("smollm2-135m", "cpu")
    handle = serve_in_thread(
        build_app(SamplerHolder(create_sampler(base)), "smollm2-135m", base.tokenizer), "127.0.0.1", 0
    )
    yield handle.url
    handle.stop()


@pytest.fixture
def scripted(scripted_server) -> Iterator[tuple[str, ScriptedSampler]]:
    url, sampler = scripted_server
    sampler.prompts.clear()
    yield url, sampler


def pytest_terminal_summary(terminalreporter) -> None:
    """The escape suite's table: each attack on each backend, expected and observed."""
    from escape_attacks import RESULTS

    if not RESULTS:
        return
    write = terminalreporter.write_line
    write("")
    write(f"{'backend':<8} {'expected':<9} {'observed':<14} attack")
    for backend, attack, want, got in sorted(RESULTS, key=lambda r: (r[0], r[1])):
        write(f"{backend:<8} {want:<9} {got:<14} {attack}")
    for backend in sorted({r[0] for r in RESULTS}):
        rows = [r for r in RESULTS if r[0] == backend]
        tried = [r for r in rows if r[3] in ("blocked", "escapes")]
        blocked = sum(r[3] == "blocked" for r in tried)
        known = [r[1] for r in tried if r[3] == "escapes" and r[2] == "escapes"]
        write(
            f"{backend}: {len(tried)} attacks tried, {blocked} blocked, {len(tried) - blocked} got out"
            + (f" (all known for {backend}: {len(known)})" if known and len(known) == len(tried) - blocked else "")
            + (f"; {len(rows) - len(tried)} not run" if len(rows) > len(tried) else "")
        )
