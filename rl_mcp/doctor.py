"""`mcp-server-rl doctor`: what this machine has for rl-mcp, without importing anything heavy.

Packages are looked up by their installed metadata (torch is never imported), keys are reported
by name only (never their values), and the profile is the one `mcp-server-rl serve` would use.
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from rl_mcp.distribution import DISTRIBUTION, OTHER_PROJECT, command_line, installed_version, other_project_version

PACKAGES = ("mcp", "atroposlib", "tinker", "torch", "transformers", "peft", "wandb", "matplotlib")


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _package_lines() -> list[str]:
    """This install under its PyPI name, and PyPI's other `rl-mcp` where it sits in the same venv (its
    `rl-mcp` command may then be the one a shell finds)."""
    ours = installed_version()
    lines = [f"{DISTRIBUTION:<13} {ours or 'not installed (run from a source tree)'}: run as `{command_line()}`"]
    other = other_project_version()
    if other is not None:
        lines.append(
            f"{OTHER_PROJECT:<13} {other}: another project on PyPI (robotics RL), not this server: "
            f"`pip uninstall {OTHER_PROJECT}`, and start this one as `{command_line('serve')}`"
        )
    return lines


def report(environ: Mapping[str, str] | None = None) -> tuple[list[str], bool]:
    """The report's lines, and whether the server can start with this environment."""
    from rl_mcp.engines.doctor_lines import engine_lines
    from rl_mcp.environments.discovery import Discovery
    from rl_mcp.environments.packages.install import VENVS_DIR, installed
    from rl_mcp.runtimes.inventory import runtime_states
    from rl_mcp.settings import SECRET_ENV_VARS, Settings, SettingsError, unexpanded_placeholders
    from rl_mcp.tool_servers.files import names_a_server
    from tinker_atropos.mcp_tools.servers_file import servers_path
    from tinker_atropos.venvs import GENERATIONS, runtimes_dir

    raw = dict(os.environ if environ is None else environ)
    placeholders = unexpanded_placeholders(raw)
    env = {k: v for k, v in raw.items() if k not in placeholders}
    lines = [f"python        {platform.python_version()} ({sys.executable})"]
    lines.extend(_package_lines())
    for package in PACKAGES:
        lines.append(f"{package:<13} {_version(package) or 'not installed'}")
    for key in SECRET_ENV_VARS:
        present = bool(env.get(key))
        note = ""
        if key == "TINKER_API_KEY" and present and not env[key].startswith("tml-"):
            note = " (malformed: Tinker keys start with 'tml-')"
        if key in placeholders:
            note = " (an unexpanded ${...} placeholder from the MCP client's config: treated as unset)"
        lines.append(f"{key:<20} {'set' if present else 'not set'}{note}")
    for name in placeholders:
        if name not in SECRET_ENV_VARS:
            lines.append(f"{name:<20} an unexpanded ${{...}} placeholder: treated as unset")
    lines.append(f"node          {shutil.which('node') or 'not found'} (only for the MCP Inspector)")
    try:
        settings = Settings.from_env(raw)
    except SettingsError as exc:
        lines.append(f"profile       ERROR: {exc}")
        return lines, False
    profile = settings.profile
    lines.append(f"profile       {profile.name} ({profile.backend} backend) {profile.source}")
    lines.append(f"              runs train {profile.model}: {settings.profile_reason}")
    missing = [k for k in profile.requires_env if not env.get(k)]
    if missing:
        lines.append(f"              missing for this profile: {', '.join(missing)}")
    if profile.backend == "local":
        folder = profile.tokenizer_name
        built = (Path(folder) / "config.json").exists()
        lines.append(
            f"local model   {profile.model}: {folder} ({'built' if built else 'not built yet: built on first run'})"
        )
    if profile.engine is not None:
        lines.extend(engine_lines(settings))
    lines.append(f"state dir     {settings.home}")
    servers = servers_path(settings.environ, settings.home)
    catalog = Discovery.for_settings(settings).scan()
    mcp = sorted(n for n in catalog.environments if names_a_server(n))
    lines.append(f"tool servers  {servers}: {', '.join(mcp) or 'none' if servers.exists() else 'no such file'}")
    for env_dir in settings.env_dirs:
        names = sorted(e.name for e in catalog.environments.values() if e.env_dir == env_dir)
        lines.append(f"env dir       {env_dir}: {', '.join(names) or 'no environments'}")
    lines.append(f"runtimes      {runtimes_dir(settings.environ)} (made on first use, or ahead by the command)")
    for state in runtime_states(settings.environ):
        size = f", {state.size_mb} MB" if state.size_mb is not None else ""
        made = f"{state.path}{size}: {state.note}" if state.made else f"not made: {state.note}"
        lines.append(f"  {state.name:<12} {made}; `{state.command}`")
    for generation in GENERATIONS.values():
        venv = generation.python(settings.environ).parent.parent
        envs = [e.name for e in catalog.environments.values() if venv in e.env_dir.parents]  # installed there
        if generation.python(settings.environ).exists():
            lines.append(f"{generation.format:<13} installed in its runtime: {', '.join(sorted(envs)) or 'none'}")
    for record in installed(settings.home):  # environment folders, each in its own layered venv
        lines.append(f"env folder    {record.environment} ({record.format}): {record.folder}")
        lines.append(f"              installed {', '.join(record.distributions) or 'nothing'}")
        lines.append(f"              into {settings.home / VENVS_DIR / record.module}, on {record.parent_python}")
    for problem in catalog.errors:
        lines.append(f"              cannot parse {problem['file']}: {problem['error']}")
    return lines, not missing


def main() -> int:
    lines, ok = report()
    print("\n".join(lines))
    return 0 if ok else 1
