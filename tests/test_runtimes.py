"""Runtimes that cannot be made fail at once, with the command to run by hand and nothing left behind:
a disk without room, a registry that cannot be reached (pip has no offline cache), a Python of the
wrong version. And one the registry cannot serve is made offline from uv's cache."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from rl_mcp.runtimes import ensure_runtime, maker

pytestmark = pytest.mark.anyio
UNREACHABLE = "http://127.0.0.1:9/simple"  # the discard port: nothing listens


def environ(runtimes: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RL_MCP_", "UV_INDEX", "UV_DEFAULT_INDEX"))}
    return {**env, "RL_MCP_RUNTIMES": str(runtimes), **extra}


def left_in(runtimes: Path) -> list[str]:
    return sorted(p.name for p in runtimes.iterdir() if p.name != ".locks") if runtimes.exists() else []


async def refused(name: str, env: dict[str, str]) -> str:
    started = time.monotonic()
    with pytest.raises(maker.RuntimeUnavailable) as caught:
        await ensure_runtime(name, env)
    assert time.monotonic() - started < 15, "it fails at once"
    message = str(caught.value)
    assert f"mcp-server-rl setup {name}" in message, message
    return message


async def test_a_disk_without_room_is_refused_before_anything_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(maker, "DEFAULT_FREE_GB", 1e9)
    message = await refused("verifiers", environ(tmp_path / "runtimes"))
    assert "GB free" in message and "RL_MCP_RUNTIMES" in message, message
    assert left_in(tmp_path / "runtimes") == []


async def test_an_unreachable_registry_without_a_cache_says_so(tmp_path: Path) -> None:
    env = environ(tmp_path / "runtimes", RL_MCP_INSTALLER="pip", PIP_INDEX_URL=UNREACHABLE)
    message = await refused("verifiers", env)
    assert "cannot be reached" in message, message
    assert left_in(tmp_path / "runtimes") == []


async def test_vllm_where_it_has_no_build_is_refused_with_what_to_do_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    started = time.monotonic()
    with pytest.raises(maker.RuntimeUnavailable) as caught:
        await ensure_runtime("vllm", environ(tmp_path / "runtimes"))
    message = str(caught.value)
    assert time.monotonic() - started < 5 and left_in(tmp_path / "runtimes") == []
    assert (
        "no build for this platform (darwin" in message
        and "trainer.sampler: engine" in message
        and "tinker profile" in message
    )


async def test_a_python_of_another_version_is_not_used(tmp_path: Path) -> None:
    bare = tmp_path / "bin"
    bare.mkdir()
    env = environ(tmp_path / "runtimes", RL_MCP_INSTALLER="pip", RL_MCP_PYTHON312=sys.executable, PATH=str(bare))
    message = await refused("verifiers-v1", env)
    assert "needs Python 3.12" in message and "RL_MCP_PYTHON312" in message, message
    assert left_in(tmp_path / "runtimes") == []


async def test_an_unreachable_registry_is_made_offline_from_uvs_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checkout's `make setup` made the verifiers runtime with uv: its wheels are in uv's cache, kept
    by index, so the registry is made unreachable where the maker probes it, its address unchanged."""
    notes: list[str] = []

    async def note(message: str) -> None:
        notes.append(message)

    async def unreachable(environ: dict[str, str]) -> bool:
        return False

    monkeypatch.setattr(maker, "_registry_reachable", unreachable)
    env = environ(tmp_path / "runtimes")
    python = await ensure_runtime("verifiers", env, note)
    assert python == tmp_path / "runtimes" / "verifiers" / "bin" / "python" and python.exists()
    assert any("offline, from its cache" in n for n in notes), notes[:3]
    assert left_in(tmp_path / "runtimes") == ["verifiers"]
