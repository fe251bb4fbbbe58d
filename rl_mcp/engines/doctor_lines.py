"""What `mcp-server-rl doctor` says about a profile's self-hosted engine: its venv, Python 3.12, whether it answers."""

from __future__ import annotations

from rl_mcp.engines.from_profile import attached_url, backend_config, probe
from rl_mcp.engines.skyrl import EngineSetupError, check_venv, default_venv
from rl_mcp.logs import tail_lines
from rl_mcp.settings import Settings


def engine_lines(settings: Settings) -> list[str]:
    url = attached_url(settings)
    if url is not None:
        problem = probe(url)
        return [f"engine        attached at {url}: {problem or 'answers'}"]
    venv = default_venv(settings.environ)
    try:
        check_venv(venv, settings.environ)
        venv_state = "ready"
    except EngineSetupError as exc:
        venv_state = str(exc)
    state_dir = settings.home / "engines" / "skyrl"
    lines = [
        "engine        SkyRL's Tinker engine, started by the server on a run's first use",
        f"              venv {venv}: {venv_state}",
        f"              backend_config {backend_config(settings)}",
    ]
    try:
        port = int((state_dir / "port").read_text())
    except (OSError, ValueError):
        return [*lines, "              not started yet by this state dir's server"]
    problem = probe(f"http://127.0.0.1:{port}", timeout_s=2.0)
    lines.append(f"              http://127.0.0.1:{port}: {'running' if problem is None else 'not running'}")
    log = state_dir / "engine.log"
    if problem is not None and log.exists():
        lines.append(f"              log {log}, last lines:")
        lines.extend(f"                {line.rstrip()}" for line in tail_lines(log, 5))
    return lines
