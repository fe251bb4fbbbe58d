"""The Tinker backend up to the network boundary: key checks and a fast, bounded first contact."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tinker_atropos.backends.factory import BackendUnavailable, create_base_sampler, create_training_backend
from tinker_atropos.trainer.config import parse_run_config

MISSING = (
    "TINKER_API_KEY is not set: export TINKER_API_KEY=tml-... (a key from the Tinker console) in "
    "the environment that starts the trainer, or use tinker.backend: local"
)
BAD_PREFIX = (
    "TINKER_API_KEY does not start with 'tml-': it is not a Tinker API key; copy the key from the "
    "Tinker console (it looks like tml-...)"
)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cfg(tmp_path: Path, base_url: str | None = None):
    return parse_run_config(
        {
            "trainer": {
                "backend": "tinker",
                "base_model": "Qwen/Qwen3-8B",
                "total_steps": 1,
                "api_url": "http://127.0.0.1:1",
                "inference_port": 2,
                "run_dir": str(tmp_path),
                "tinker_base_url": base_url,
            }
        }
    )


@pytest.mark.parametrize("create", [create_training_backend, create_base_sampler])
def test_missing_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, create) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    start = time.monotonic()
    with pytest.raises(BackendUnavailable) as err:
        create(_cfg(tmp_path))
    assert str(err.value) == MISSING
    assert time.monotonic() - start < 1.0


@pytest.mark.parametrize("key", ["sk-abc123", "TML-abc", "  "])
def test_bad_key_prefix_is_rejected_without_echoing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key: str
) -> None:
    monkeypatch.setenv("TINKER_API_KEY", key)
    with pytest.raises(BackendUnavailable) as err:
        create_training_backend(_cfg(tmp_path))
    assert str(err.value) == (MISSING if not key.strip() else BAD_PREFIX)
    assert key.strip() == "" or key not in str(err.value)


def test_unreachable_service_fails_fast_and_the_process_exits(tmp_path: Path) -> None:
    """A dead endpoint (closed local port) fails within TINKER_CONNECT_TIMEOUT, not the SDK's 300 s."""
    url = f"http://127.0.0.1:{_closed_port()}"
    script = textwrap.dedent(f"""
        import sys
        from tinker_atropos.backends.factory import BackendUnavailable, create_training_backend
        from tinker_atropos.trainer.config import parse_run_config
        cfg = parse_run_config({{"trainer": {{"backend": "tinker", "base_model": "Qwen/Qwen3-8B",
            "total_steps": 1, "api_url": "http://127.0.0.1:1", "inference_port": 2,
            "run_dir": {str(tmp_path)!r}, "tinker_base_url": {url!r}}}}})
        try:
            create_training_backend(cfg)
        except BackendUnavailable as exc:
            print(exc)
            sys.exit(3)
    """)
    env = {
        "PATH": "/usr/bin:/bin",
        "TINKER_API_KEY": "tml-not-a-real-key",
        "TINKER_CONNECT_TIMEOUT": "2",
        "TINKER_TELEMETRY": "0",
        "HOME": str(tmp_path),
    }
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    elapsed = time.monotonic() - start
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.strip() == (
        f"Tinker did not answer within 2 s while trying to reach the service at {url}: check the "
        "network (and proxy settings), that TINKER_BASE_URL / tinker.tinker_base_url points at the "
        "Tinker service, and the Tinker status page; or use tinker.backend: local"
    )
    assert "tml-not-a-real-key" not in proc.stdout + proc.stderr
    assert elapsed < 20, elapsed  # 2 s bound + interpreter start; the SDK alone would retry ~300 s


def test_bad_connect_timeout_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-x")
    monkeypatch.setenv("TINKER_CONNECT_TIMEOUT", "soon")
    with pytest.raises(BackendUnavailable, match=r"TINKER_CONNECT_TIMEOUT='soon' is not a number"):
        create_training_backend(_cfg(tmp_path))
