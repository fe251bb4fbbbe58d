"""verifiers environments, both API generations: a file defining `load_environment` that imports
verifiers (`files.py` reads it, never importing it), or a package installed in a verifiers runtime
(`installed.py`). A run's environment process is the host (`VerifiersHostEnv`) on the training
runtime, which drives the environment in a child on the generation's own venv."""

from __future__ import annotations

import ast
import functools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rl_mcp.environments.packages.folder import PackageFolder
from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo, FieldSpec, IntrospectionError
from rl_mcp.formats.base import EnvironmentFormat, FieldPlaces, Places, Section
from rl_mcp.formats.verifiers.files import CLASSIC as CLASSIC_NAME
from rl_mcp.formats.verifiers.files import ENTRY_POINT, HOST_CLASS, HOST_FILE, SET_BY_HOST, VerifiersEnv, read_file
from rl_mcp.formats.verifiers.files import V1 as V1_NAME
from rl_mcp.formats.verifiers.files import read_module as read_verifiers_module
from rl_mcp.formats.verifiers.installed import installed
from tinker_atropos.venvs import GENERATIONS, packages_stamp

SECTION = "verifiers"
# Both generations ask of each scanned tree in turn: it is read once (the last tree, by identity).
_read_tree = functools.lru_cache(maxsize=1)(read_verifiers_module)


class VerifiersFormat(EnvironmentFormat):
    """One generation of verifiers (its name is its runtime's)."""

    sections = (
        Section(
            SECTION,
            "verifiers_args",
            "a verifiers environment's own arguments (load_environment's, or its v1 EnvConfig's)",
        ),
    )

    def __init__(self) -> None:
        self._installed: tuple[tuple[int, ...], list[EnvironmentInfo]] = ((), [])

    @property
    def host(self) -> EnvironmentInfo:
        """The environment class a run's environment process runs (its fields are every run's)."""
        return EnvironmentInfo(
            name=self.name,
            class_name=HOST_CLASS,
            file=HOST_FILE,
            env_dir=HOST_FILE.parent,
            line=0,
            description="",
            config_class="VerifiersHostConfig",
            format=self.name,
        )

    def read_module(self, tree: ast.Module) -> VerifiersEnv | None:
        found = _read_tree(tree)
        return found if found is not None and found.format == self.name else None

    def file_environment(
        self, found: VerifiersEnv, path: Path, env_dir: Path, package: PackageFolder | None
    ) -> EnvironmentInfo:
        return EnvironmentInfo(
            name=package.module if package is not None else path.stem,
            class_name=ENTRY_POINT,
            file=path,
            env_dir=env_dir,
            line=found.line,
            description=found.description,
            config_class=found.config_class,
            format=self.name,
            entry=package.module if package is not None else None,  # a folder's: loaded as installed
            package=package,
        )

    def installed(self, places: Places) -> list[EnvironmentInfo]:
        """Those installed in this generation's runtime, read again only when its site-packages change."""
        if places.environ is None:
            return []
        python = GENERATIONS[self.name].python(places.environ)
        now = packages_stamp(python, {})
        if now != self._installed[0]:
            found = [
                EnvironmentInfo(
                    name=p.module,
                    class_name=ENTRY_POINT,
                    file=p.file,
                    env_dir=p.site,
                    line=p.found.line,
                    description=p.found.description,
                    config_class=p.found.config_class,
                    format=self.name,
                    entry=p.module,
                )
                for p in installed(python)
                if p.found.format == self.name  # a classic module in the v1 venv cannot run there
            ]
            self._installed = (now, found)
        return self._installed[1]

    def fields_of(self, info: EnvironmentInfo) -> EnvironmentInfo:
        return self.host

    def schema(self, info: EnvironmentInfo, read: ConfigSchema, places: FieldPlaces) -> ConfigSchema:
        """Its fields, read from its file now (section `verifiers`), then its host's (less what the run
        sets); where a name is both, the environment's field is kept (as an Atropos config's is)."""
        found = read_file(info.file)
        if found is None or found.format != info.format:
            raise IntrospectionError(
                f"{info.file} no longer defines the {info.format} environment {info.name!r} (or no longer "
                "parses): fix it, or call rl_list_environments and select again"
            )
        hosted = {n: f for n, f in read.fields.items() if n not in SET_BY_HOST}
        fields: dict[str, FieldSpec] = {}
        for name, spec in found.fields.items():
            if name in hosted:
                shadows = f"hides the {hosted[name].section} field {name!r} of every run"
                spec = {**spec, "description": "; ".join(filter(None, [spec["description"], shadows]))}
            fields[name] = FieldSpec(name=name, section=SECTION, **spec)
        for name, host_spec in hosted.items():
            fields.setdefault(name, host_spec)
        venv = places.venv_of(info.package) if info.package is not None else None  # its run's child runs there
        return ConfigSchema(
            environment=info.name,
            config_class=found.config_class,
            fields=fields,
            defs=read.defs,
            training_error=read.training_error,
            run_source={
                "verifiers_format": info.format,
                **({"verifiers_module": info.entry} if info.entry else {"verifiers_file": str(info.file)}),
                **({"verifiers_venv": str(venv)} if venv is not None else {}),
            },
            section_keys={s.name: s.env_key for s in self.sections},
        )

    def process_file(self, env_file: Path) -> Path | None:
        found = read_file(env_file)
        return HOST_FILE if found is not None and found.format == self.name else None

    def runs(self, env: Mapping[str, Any]) -> bool:
        return env.get("verifiers_format") == self.name


class Classic(VerifiersFormat):
    name = CLASSIC_NAME
    summary = "classic `load_environment` -> vf.Environment, run in its venv"
    runtime = CLASSIC_NAME
    note = (
        " It is a verifiers environment, run from its own code in the verifiers venv: the fields in section "
        "`verifiers` are its load_environment arguments; its rubric scores the replies, and a long prompt "
        "(tools, many turns) counts against max_token_trainer_length."
    )


class V1(VerifiersFormat):
    name = V1_NAME
    summary = "Taskset + Harness, run in its venv"
    runtime = V1_NAME
    note = (
        " It is a verifiers-v1 environment, run from its own code in the verifiers-v1 venv: the fields in "
        "section `verifiers` are its EnvConfig's; its Task's rewards score the episodes."
    )


FORMATS = (Classic(), V1())
