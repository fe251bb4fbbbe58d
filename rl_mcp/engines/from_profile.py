"""Which engine a server's profile trains on: a managed SkyRL engine, one the operator runs, or none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio.abc
import httpx

from rl_mcp.engines.service import EngineService
from rl_mcp.engines.skyrl import DEFAULT_BACKEND_CONFIG, SkyrlSpec, default_venv
from rl_mcp.runs.ports import PortReservations
from rl_mcp.settings import Settings, SettingsError

START_TIMEOUT_S = 900.0


def managed_engine(settings: Settings, tg: anyio.abc.TaskGroup, ports: PortReservations) -> EngineService | None:
    """The engine this server starts for its runs (`engine: {kind: skyrl}` without a url), else None."""
    engine = settings.profile.engine
    if engine is None or engine.get("url") or attached_url(settings):
        return None
    from tinker_atropos.models.paths import model_ref  # torch-free by contract

    state_dir = settings.home / "engines" / "skyrl"
    spec = SkyrlSpec(
        venv=default_venv(settings.project_root, settings.environ),
        model_name=settings.profile.model,
        model_dir=Path(model_ref(settings.profile.model)),
        port=_stable_port(state_dir / "port", ports),
        state_dir=state_dir,
        backend_config=backend_config(settings),
    )
    timeout = float(settings.environ.get("RL_MCP_ENGINE_START_TIMEOUT") or START_TIMEOUT_S)
    return EngineService(settings, spec, tg, start_timeout_s=timeout)


def _stable_port(record: Path, ports: PortReservations) -> int:
    """The port the engine had in an earlier server lifetime when it is free (the configs of its runs,
    which a resume reuses, name it), else a new one, recorded."""
    try:
        port = ports.reserve_exact(int(record.read_text()))
    except (OSError, ValueError):
        port = None
    if port is None:
        port = ports.reserve(1)[0]
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(str(port))
    return port


def attached_url(settings: Settings) -> str | None:
    """An engine the operator runs: $RL_MCP_ENGINE_URL, else the profile's `engine.url`."""
    engine = settings.profile.engine
    if engine is None:
        return None
    return settings.environ.get("RL_MCP_ENGINE_URL") or engine.get("url")


def backend_config(settings: Settings) -> dict[str, Any]:
    """SkyRL's JAX backend options: the defaults, the profile's, then $RL_MCP_ENGINE_BACKEND_CONFIG (JSON)."""
    config = {**DEFAULT_BACKEND_CONFIG, **((settings.profile.engine or {}).get("backend_config") or {})}
    raw = settings.environ.get("RL_MCP_ENGINE_BACKEND_CONFIG")
    if raw:
        try:
            extra = json.loads(raw)
        except ValueError as exc:
            raise SettingsError(f"RL_MCP_ENGINE_BACKEND_CONFIG is not JSON ({exc}): {raw!r}") from exc
        if not isinstance(extra, dict):
            raise SettingsError(f"RL_MCP_ENGINE_BACKEND_CONFIG must be a JSON object, got {raw!r}")
        config.update(extra)
    return config


def probe(url: str, timeout_s: float = 5.0) -> str | None:
    """None when a Tinker-API server answers at `url`, else what went wrong (for doctor)."""
    try:
        resp = httpx.get(f"{url.rstrip('/')}/api/v1/healthz", timeout=timeout_s, trust_env=False)
    except httpx.HTTPError as exc:
        return f"not reachable ({type(exc).__name__}: {exc})"
    return None if resp.status_code == 200 else f"answered {resp.status_code} to /api/v1/healthz"
