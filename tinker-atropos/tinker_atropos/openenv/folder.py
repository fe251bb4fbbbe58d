"""An OpenEnv environment folder as `openenv init` makes it (pure: files read, nothing run).

`openenv.yaml` names the app (`app: server.app:app`, imported from the folder as uvicorn would) and
the runtime (`fastapi`). Hub and Docker sources cannot run here: `refuse_remote_source` says what to
do instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

MANIFEST = "openenv.yaml"
_APP = re.compile(r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$")
_HUB = re.compile(r"^(https?://)?(huggingface\.co|hf\.co)/|\.hf\.space\b")


class OpenEnvFolderError(ValueError):
    """The folder is not a servable OpenEnv environment: names the file and what to fix."""


@dataclass(frozen=True)
class OpenEnvFolder:
    path: Path
    name: str
    app: str  # `module:attribute`, imported with the folder first on sys.path
    description: str

    @property
    def app_file(self) -> Path:
        return self.path.joinpath(*self.app.partition(":")[0].split(".")).with_suffix(".py")


def read_openenv_folder(folder: Path) -> OpenEnvFolder:
    manifest = folder / MANIFEST
    try:
        data = yaml.safe_load(manifest.read_text())
    except OSError as exc:
        raise OpenEnvFolderError(f"{manifest} cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise OpenEnvFolderError(f"{manifest} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise OpenEnvFolderError(f"{manifest} holds no mapping: it needs at least `app: server.app:app`")
    runtime = data.get("runtime", "fastapi")
    if runtime != "fastapi":
        raise OpenEnvFolderError(f"{manifest}: runtime {runtime!r} cannot be served here; only `fastapi` can")
    app = data.get("app")
    if not isinstance(app, str) or not _APP.match(app):
        raise OpenEnvFolderError(
            f"{manifest} names no app to serve (`app: {app}`): add the module and attribute of its FastAPI app, "
            "as `openenv init` writes it: `app: server.app:app`"
        )
    found = OpenEnvFolder(
        folder.resolve(), str(data.get("name") or folder.name), app, str(data.get("description") or "")
    )
    if not found.app_file.is_file() and not (found.app_file.with_suffix("") / "__init__.py").is_file():
        raise OpenEnvFolderError(f"{manifest}: app {app!r} names {found.app_file}, which does not exist")
    return found


def refuse_remote_source(source: str) -> str | None:
    """Why a Hub Space, a Hub repo id or a Docker image cannot be an environment here, and what to do
    instead; None for anything else."""
    what = None
    if source.startswith(("docker://", "docker:")) or source.startswith("from_docker_image"):
        what = "a Docker image"
    elif _HUB.search(source) or source.startswith(("hf://", "from_hub")):
        what = "a Hugging Face Hub source"
    if what is None:
        return None
    return (
        f"{source!r} is {what}, which this machine cannot reach or run: clone the Space's repository into a folder "
        "under your environment directories (it holds an openenv.yaml), or run its server yourself and give its URL "
        "in the OpenEnv servers file"
    )
