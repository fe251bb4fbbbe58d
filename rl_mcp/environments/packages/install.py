"""An environment folder installed into a venv of its own, layered on its generation's venv.

The layered venv (`RL_MCP_HOME/env-venvs/<module>/`) has no packages of its own at first: a `.pth`
file adds the parent venv's site-packages after its own (verifiers 0.1.14's, 0.4.0's, or the
product's venv for Atropos and Hermes), so the environment sees the parent's pins and pip installs
only what the folder adds. A dry run (`pip install --dry-run --report`) comes first: a requirement the
registry cannot meet, or one that would replace a version the parent has, is refused before anything
is installed. The folder's content hash, recorded beside the venv, decides a reinstall.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from rl_mcp.environments.missing_module import ModuleHome
from rl_mcp.environments.packages import resolve
from rl_mcp.environments.packages.folder import PYPROJECT, PackageFolder, content_hash, normalize, read_folder
from rl_mcp.errors import UserError
from rl_mcp.runtimes.installer import run_streamed
from tinker_atropos.venvs import GENERATIONS

Report = Callable[[str], Awaitable[None]]
RECORD = "rl-mcp-install.json"
PARENT_PTH = "_rl_mcp_parent.pth"
VENVS_DIR = "env-venvs"
INSTALL_TIMEOUT_S = 900.0
SHOWN_CONFLICTS = 3
_COPY_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".git", ".venv")


class PackageInstallError(UserError):
    """An environment folder could not be installed; the parent venv is unchanged."""


class InstallRecord(BaseModel):
    """What `RL_MCP_HOME/env-venvs/<module>/rl-mcp-install.json` says (read back by runs and doctor)."""

    environment: str
    module: str
    format: str
    folder: str
    hash: str
    parent_python: str
    distributions: list[str]  # `name==version`, each added to the venv (the folder's own first)
    installed_at: float
    seconds: float


@dataclass(frozen=True)
class Runtime:
    """Where an environment process runs: its Python (an Atropos folder's layered venv, else the product's;
    a verifiers folder's child runs on its layered venv by its run config's `verifiers_venv`), and where
    the environment's own code imports from."""

    python: str
    home: ModuleHome
    installed: InstallRecord | None = None


def site_dirs(venv: Path) -> list[Path]:
    return sorted(venv.glob("lib/python3*/site-packages"))


def parent_python(env_format: str | None, environ: Mapping[str, str], product_python: str) -> Path:
    """The interpreter of the venv an environment of `env_format` runs in, before any layer."""
    generation = GENERATIONS.get(env_format) if env_format else None
    return generation.python(environ) if generation is not None else Path(product_python)


def _label(env_format: str | None) -> str:
    generation = GENERATIONS.get(env_format) if env_format else None
    return f"the {generation.runtime} runtime" if generation else "the training runtime"


def lookup_sites(environ: Mapping[str, str], product_python: str) -> tuple[Path, ...]:
    """Where a missing module's distribution is looked up: every venv this product runs code in."""
    pythons = [Path(product_python), *(g.python(environ) for g in GENERATIONS.values())]
    return tuple(site for python in pythons for site in site_dirs(python.parent.parent))


def default_runtime(env_format: str | None, environ: Mapping[str, str], product_python: str) -> Runtime:
    """An environment file's runtime: its generation's venv (verifiers) or the product's."""
    venv = parent_python(env_format, environ, product_python).parent.parent
    return Runtime(product_python, ModuleHome(venv, _label(env_format), lookup=lookup_sites(environ, product_python)))


def _layered(record: InstallRecord, venv: Path, environ: Mapping[str, str], product_python: str) -> Runtime:
    """An installed folder's runtime: the Atropos process itself on the layered venv, or (verifiers)
    the host on the product's and its child on the layered venv."""
    label = f"environment {record.environment}'s own, layered on {Path(record.parent_python).parent.parent}"
    home = ModuleHome(venv, label, Path(record.folder) / PYPROJECT, lookup_sites(environ, product_python))
    python = product_python if record.format in GENERATIONS else str(venv / "bin" / "python")
    return Runtime(python, home, record)


def read_record(venv: Path) -> InstallRecord | None:
    try:
        return InstallRecord.model_validate_json((venv / RECORD).read_text())
    except (OSError, ValueError):
        return None


def installed(home: Path) -> list[InstallRecord]:
    """Every environment folder installed under this state dir (for `mcp-server-rl doctor`)."""
    records = (read_record(venv) for venv in sorted((home / VENVS_DIR).glob("*")))
    return [r for r in records if r is not None]


def runtime_of_file(
    home: Path, env_file: Path, env_format: str | None, environ: Mapping[str, str], product_python: str
) -> Runtime:
    """The runtime of the environment in `env_file`: its folder's layered venv when that folder is
    installed (a run starts after its install), else its generation's."""
    for folder in list(env_file.parents)[:4]:
        found = read_folder(folder) if (folder / PYPROJECT).is_file() else None
        if found is not None:
            venv = home / VENVS_DIR / found.module
            record = read_record(venv)
            if record is not None and Path(record.folder) == folder.resolve():
                return _layered(record, venv, environ, product_python)
            break
    return default_runtime(env_format, environ, product_python)


class EnvPackages:
    """The environment folders of one state dir: installed on first use, one install at a time."""

    def __init__(self, home: Path, environ: Mapping[str, str], product_python: str = sys.executable) -> None:
        self.root = home / VENVS_DIR
        self.environ = environ
        self.product_python = product_python
        self._lock = anyio.Lock()

    def venv(self, folder: PackageFolder) -> Path:
        """The layered venv a folder is (or will be) installed in."""
        return self.root / folder.module

    async def runtime(
        self, name: str, env_format: str, folder: PackageFolder | None, report: Report | None = None
    ) -> Runtime:
        """Where an environment runs; a folder installed first when it is not, or changed since."""
        if folder is None:
            return default_runtime(env_format, self.environ, self.product_python)
        return await self.ensure(name, folder, env_format, report)

    async def ensure(self, name: str, folder: PackageFolder, env_format: str, report: Report | None = None) -> Runtime:
        """The folder's runtime, installed first when its venv is missing or its contents changed;
        PackageInstallError (nothing changed) when its dependencies cannot be met here."""
        async with self._lock:
            venv, parent = self.root / folder.module, parent_python(env_format, self.environ, self.product_python)
            digest = await anyio.to_thread.run_sync(content_hash, folder.path)
            record = read_record(venv)
            fresh = record is not None and (record.hash, record.parent_python) == (digest, str(parent))
            if not (fresh and record is not None and Path(record.folder) == folder.path.resolve()):
                record = await self._install(name, folder, env_format, parent, venv, digest, report or _quiet)
            return _layered(record, venv, self.environ, self.product_python)

    async def _install(
        self, name: str, folder: PackageFolder, env_format: str, parent: Path, venv: Path, digest: str, report: Report
    ) -> InstallRecord:
        if not parent.exists():
            raise PackageInstallError(f"environment {name!r} cannot be installed: its venv's {parent} does not exist")
        started = time.monotonic()
        self.root.mkdir(parents=True, exist_ok=True)
        scratch = venv.with_name(f".{venv.name}.new")
        with tempfile.TemporaryDirectory(prefix="env-src-", dir=self.root) as tmp:
            source = Path(tmp) / folder.path.name  # builds write into the folder they build: a copy's
            await anyio.to_thread.run_sync(lambda: shutil.copytree(folder.path, source, ignore=_COPY_IGNORE))
            await report(
                f"installing environment {name} from {folder.path} into {venv} (layered on {parent.parent.parent})"
            )
            try:
                await _make_layered(parent, scratch)
                plan = await self._dry_run(name, folder, scratch, parent, source, Path(tmp) / "report.json")
                shutil.rmtree(venv, ignore_errors=True)
                scratch.rename(venv)  # no scripts yet: nothing in it names its own path
                await _pip_install(venv, source, report)
            except BaseException:
                shutil.rmtree(scratch, ignore_errors=True)
                if not (venv / RECORD).exists():
                    shutil.rmtree(venv, ignore_errors=True)
                raise
        record = InstallRecord(
            environment=name,
            module=folder.module,
            format=env_format,
            folder=str(folder.path.resolve()),
            hash=digest,
            parent_python=str(parent),
            distributions=[f"{p.name}=={p.version}" for p in plan],
            installed_at=time.time(),
            seconds=round(time.monotonic() - started, 1),
        )
        (venv / RECORD).write_text(record.model_dump_json(indent=1))
        await report(f"installed environment {name}: {', '.join(record.distributions)} in {record.seconds} s")
        return record

    async def _dry_run(
        self, name: str, folder: PackageFolder, scratch: Path, parent: Path, source: Path, out: Path
    ) -> list[resolve.Planned]:
        """What the install would add; PackageInstallError when the registry cannot meet a requirement
        or it would replace a version the parent venv has."""
        argv = [str(scratch / "bin" / "python"), "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(out)]
        proc = await _pip([*argv, str(source)])
        parent_venv = parent.parent.parent
        where = f"environment {name!r} ({folder.path}) cannot be installed into a venv layered on {parent_venv}"
        if proc.returncode != 0:
            raise PackageInstallError(
                f"{where}: {resolve.pip_failure(proc.stderr.decode(errors='replace'))}. Nothing was installed; "
                f"{parent_venv} is unchanged. Fix the dependencies in {folder.path / PYPROJECT}"
            )
        report: dict[str, Any] = json.loads(out.read_text())
        plan = resolve.planned(report)
        parent_sites = site_dirs(parent_venv)
        found = resolve.conflicts(
            plan, resolve.installed_versions(parent_sites), folder.dependencies, folder.distribution
        )
        if found:
            shown = [
                dataclasses.replace(c, required_there_by=tuple(resolve.requirers(parent_sites, normalize(c.name))))
                for c in found[:SHOWN_CONFLICTS]
            ]
            more = f"\n(and {len(found) - len(shown)} more that follow from these)" if len(found) > len(shown) else ""
            raise PackageInstallError(
                f"{where}:\n"
                + "\n".join(_conflict_line(c, parent_venv) for c in shown)
                + more
                + (
                    f"\nNothing was installed; {parent_venv} is unchanged (an environment never changes its pins). "
                    f"Relax the requirement in {folder.path / PYPROJECT} to accept the installed version."
                )
            )
        return plan


def _conflict_line(c: resolve.Conflict, parent_venv: Path) -> str:
    asked = ", ".join(c.required_as) or c.name
    there = f" (required there by {', '.join(c.required_there_by)})" if c.required_there_by else ""
    pinned = f"{c.name}=={c.installed} pinned in {parent_venv}{there}"
    return f"- {asked} needs {c.name} {c.wanted}, which conflicts with {pinned}"


async def _quiet(message: str) -> None:
    return None


async def _pip(argv: list[str]) -> Any:
    with anyio.fail_after(INSTALL_TIMEOUT_S):
        return await anyio.run_process(argv, check=False, env=_pip_env())


def _pip_env() -> dict[str, str]:
    return {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1"}


async def _make_layered(parent: Path, venv: Path) -> None:
    """A venv on the parent's base interpreter whose `.pth` adds the parent's site-packages after its
    own (`site.addsitedir`: the parent's own `.pth` files, editable installs included, work too)."""
    shutil.rmtree(venv, ignore_errors=True)
    proc = await _pip([str(parent), "-m", "venv", "--without-pip", str(venv)])
    if proc.returncode != 0:
        raise PackageInstallError(f"could not make a venv at {venv}: {proc.stderr.decode(errors='replace')[-500:]}")
    lines = "".join(f"import site; site.addsitedir({str(s)!r})\n" for s in site_dirs(parent.parent.parent))
    for own in site_dirs(venv):
        (own / PARENT_PTH).write_text(lines)


async def _pip_install(venv: Path, source: Path, report: Report) -> None:
    """pip install of the folder's copy into `venv`, each line of its output reported as it comes."""
    argv = [str(venv / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off", str(source)]
    code, lines = await run_streamed(argv, os.environ, report, prefix="pip: ", timeout_s=INSTALL_TIMEOUT_S)
    if code != 0:
        raise PackageInstallError(
            f"pip install of {source.name} into {venv} failed (exit {code}): " + "\n".join(lines[-12:])
        )
