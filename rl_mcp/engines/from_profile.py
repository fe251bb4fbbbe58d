"""Which engine a server's profile trains on: a managed SkyRL engine, one the operator runs, or none."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio.abc
import httpx

from rl_mcp.engines.service import EngineService
from rl_mcp.engines.skyrl import DEFAULT_BACKEND_CONFIG, SkyrlSpec, default_venv
from rl_mcp.runs.ports import PortReservations
from rl_mcp.settings import Settings, SettingsError
from tinker_atropos.http_tls import shared_tls

START_TIMEOUT_S = 900.0
IDLE_STOP_S = 600.0
"""How long the managed engine stays up after its last run ends (RL_MCP_ENGINE_IDLE_STOP; 0: until
the server exits). Long enough for an export or inference test right after a run, without a restart."""


def managed_engine(
    settings: Settings, tg: anyio.abc.TaskGroup, ports: PortReservations, in_use: Callable[[], bool]
) -> EngineService | None:
    """The engine this server starts for its runs (`engine: {kind: skyrl}` without a url), else None;
    `in_use`: whether a run is using it now."""
    engine = settings.profile.engine
    if engine is None or engine.get("url") or attached_url(settings):
        return None
    from tinker_atropos.models.paths import model_ref  # torch-free by contract

    state_dir = settings.home / "engines" / "skyrl"
    spec = SkyrlSpec(
        venv=default_venv(settings.environ),
        model_name=settings.profile.model,
        model_dir=Path(model_ref(settings.profile.model)),
        port=_stable_port(state_dir / "port", ports),
        state_dir=state_dir,
        backend_config=backend_config(settings),
    )
    timeout = _seconds(settings, "RL_MCP_ENGINE_START_TIMEOUT", START_TIMEOUT_S)
    idle = _seconds(settings, "RL_MCP_ENGINE_IDLE_STOP", IDLE_STOP_S)
    return EngineService(settings, spec, tg, start_timeout_s=timeout, idle_stop_s=idle or None, in_use=in_use)


def _seconds(settings: Settings, var: str, default: float) -> float:
    raw = settings.environ.get(var, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if value < 0:
        raise SettingsError(f"{var} must be a number of seconds (0 or more), got {raw!r}")
    return value


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
        resp = httpx.get(f"{url.rstrip('/')}/api/v1/healthz", timeout=timeout_s, trust_env=False, verify=shared_tls())
    except httpx.HTTPError as exc:
        return f"not reachable ({type(exc).__name__}: {exc})"
    return None if resp.status_code == 200 else f"answered {resp.status_code} to /api/v1/healthz"
