"""OpenEnv environments as `openenv:<name>`: every folder under the env dirs that holds an
`openenv.yaml`, every installed `openenv-*` distribution in the OpenEnv venv that carries one, and
every running server the user names by URL in the OpenEnv servers file.

Each is a run of the bundled `OpenEnvEnv` with its source set (`SET_BY_SERVER`): a folder is
installed on first use into a venv of its own, layered on the OpenEnv venv (`packages/install.py`),
and served from there; a URL is the user's own server. Hub and Docker sources are listed as unusable,
with what to do instead. Nothing is imported or started here.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl_mcp.environments.packages.folder import PackageFolder, normalize, read_project
from rl_mcp.formats.base import folders_holding
from rl_mcp.settings import BUNDLED_ENV_DIR
from tinker_atropos.openenv.folder import MANIFEST, OpenEnvFolderError, read_openenv_folder, refuse_remote_source
from tinker_atropos.venvs import site_dirs

PREFIX = "openenv:"
ENV_FILE = BUNDLED_ENV_DIR / "openenv_env.py"
ENV_CLASS = "OpenEnvEnv"
SET_BY_SERVER = ("openenv_folder", "openenv_url", "openenv_python")
SERVERS_VAR = "RL_MCP_OPENENV_SERVERS"
SERVERS_NAME = "openenv-servers.json"
MAX_DEPTH = 3


@dataclass(frozen=True)
class OpenEnvEntry:
    name: str  # openenv:<name>
    description: str
    folder: Path | None = None
    url: str | None = None
    package: PackageFolder | None = None  # a folder to install into its layered venv before it runs
    error: str | None = None  # why it cannot run (listed, not dropped)


def is_host(file: Path, class_name: str) -> bool:
    """Whether this class is the bundled OpenEnvEnv (listed through its sources, not by itself)."""
    return class_name == ENV_CLASS and file.resolve() == ENV_FILE.resolve()


def servers_path(environ: dict[str, str] | Any, home: Path) -> Path:
    named = str(environ.get(SERVERS_VAR, "")).strip()
    return Path(named).expanduser() if named else home / SERVERS_NAME


def is_manifest_among(filenames: list[str]) -> bool:
    """Whether a folder with these files is an OpenEnv environment's."""
    return MANIFEST in filenames


def _package(folder: Path, name: str) -> PackageFolder | None:
    """The folder as an installable package (its pyproject's dependencies), keyed by its OpenEnv name:
    every `openenv init` folder's module is `server`."""
    project = read_project(folder)
    if project is None:
        return None
    distribution, dependencies, _ = project
    return PackageFolder(folder, distribution, f"openenv-{normalize(name)}", folder, dependencies)


def folder_entry(folder: Path) -> OpenEnvEntry:
    try:
        found = read_openenv_folder(folder)
    except OpenEnvFolderError as exc:
        return OpenEnvEntry(f"{PREFIX}{folder.name}", f"unusable: {exc}", folder=folder, error=str(exc))
    said = found.description or f"the OpenEnv environment in {found.path}"
    return OpenEnvEntry(f"{PREFIX}{found.name}", said, folder=found.path, package=_package(found.path, found.name))


def folders_in(env_dir: Path) -> list[Path]:
    """The OpenEnv folders under an env dir (not inside one another), to MAX_DEPTH."""
    return folders_holding(env_dir, MANIFEST, MAX_DEPTH)


def installed_folders(python: Path) -> list[Path]:
    """The folders of installed `openenv-*` distributions that carry an openenv.yaml (from RECORD)."""
    out = []
    for site in site_dirs(python):
        # `openenv_<name>-<version>.dist-info`: not OpenEnv's own (`openenv-0.10.0`, `openenv_core-0.3.0`),
        # whose templates carry an openenv.yaml
        for dist_info in sorted(site.glob("openenv_*.dist-info")):
            if dist_info.name.startswith("openenv_core-"):
                continue
            record = dist_info / "RECORD"
            lines = record.read_text().splitlines() if record.is_file() else []
            for line in lines:
                path = line.split(",", 1)[0]
                if path.endswith(f"/{MANIFEST}") and ".dist-info/" not in path:
                    out.append((site / path).parent.resolve())
    return out


def url_entries(path: Path) -> list[OpenEnvEntry]:
    """The servers the user runs (`{"servers": {"name": {"url": ..., "description": ...}}}`); a Hub or
    Docker source, or a bad entry, listed as unusable with what to do."""
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text())
        servers = data["servers"]
        if not isinstance(servers, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path} is not an OpenEnv servers file ({type(exc).__name__}): write "
            '{"servers": {"name": {"url": "http://127.0.0.1:8000"}}}'
        ) from None
    return [_url_entry(name, spec, path) for name, spec in sorted(servers.items())]


def _url_entry(name: str, spec: Any, path: Path) -> OpenEnvEntry:
    spec = spec if isinstance(spec, dict) else {}
    url = spec.get("url")
    if spec.get("docker"):
        refused = refuse_remote_source(f"docker:{spec['docker']}")
    elif spec.get("hub"):
        refused = refuse_remote_source(f"hf://{spec['hub']}")
    else:
        refused = refuse_remote_source(url) if isinstance(url, str) else None
    if refused is None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        refused = f"server {name!r} in {path} needs a `url`: the http://host:port of a running OpenEnv server"
    if refused is not None:
        return OpenEnvEntry(f"{PREFIX}{name}", f"unusable: {refused}", error=refused)
    return OpenEnvEntry(f"{PREFIX}{name}", str(spec.get("description") or f"the OpenEnv server at {url}"), url=url)


def entries(
    folders: list[Path], python: Path | None, servers: Path | None
) -> tuple[list[OpenEnvEntry], list[dict[str, str]]]:
    """Every OpenEnv environment: the env dirs' folders (each installed on first use), the OpenEnv
    venv's installed distributions (run as they are) and the servers file's; what could not be read."""
    found = [folder_entry(f) for f in folders]
    found += [dataclasses.replace(folder_entry(f), package=None) for f in installed_folders(python)] if python else []
    try:
        found += url_entries(servers) if servers else []
    except ValueError as exc:
        return found, [{"file": str(servers), "error": str(exc)}]
    return found, []


def run_source(entry_folder: Path | None, url: str | None, python: str) -> dict[str, str]:
    """What a run of an OpenEnv environment is told: its folder and the Python serving it, or its URL."""
    if url:
        return {"openenv_url": url}
    return {"openenv_folder": str(entry_folder), "openenv_python": python}
