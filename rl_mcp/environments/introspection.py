"""Config introspection: an environment's fields, from a short-lived child process.

The child (`python -m rl_mcp.children.introspect FILE CLASS`) imports the file, calls
`config_init()` and prints JSON; import side effects, heavy dependencies and crashes stay there.
Its answer is cached by the file's mtime, in memory and on disk.

A verifiers environment cannot be imported there (nor in the server): its own fields are read from
its AST (`verifiers_format.py`), before the fields every run has, which the same child reports
without importing any environment (`--product-fields`: atroposlib's BaseEnvConfig, the training
fields), cached once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from rl_mcp import warm_start
from rl_mcp.children.introspect import PRODUCT_FIELDS, RESULT_MARKER
from rl_mcp.environments import mcp_format, openenv_format
from rl_mcp.environments.discovery import EnvironmentInfo
from rl_mcp.environments.missing_module import explain
from rl_mcp.environments.packages.install import EnvPackages
from rl_mcp.environments.reasoning_gym_format import SET_BY_TASK, task_fields
from rl_mcp.environments.verifiers_format import FORMATS, HOST_CLASS, HOST_FILE, SET_BY_HOST, read_file
from rl_mcp.errors import UserError
from rl_mcp.processes import run_captured
from rl_mcp.runtimes import ensure_runtime
from rl_mcp.settings import TRAINER_PACKAGE_DIR, Settings, without_secrets
from rl_mcp.tmpdirs import child_tmpdir
from tinker_atropos.mcp_tools.servers_file import servers_path
from tinker_atropos.run_files import atomic_write_text
from tinker_atropos.venvs import OPENENV, packages_stamp

TRACEBACK_TAIL_LINES = 15
_PRODUCT_WHAT = "the fields every run has (atroposlib's BaseEnvConfig and the training fields)"
CACHE_VERSION = "3"  # bump when the shape of a cached introspection changes
# BaseEnvConfig leaves these unbounded, but a run cannot work below these values (GRPO needs
# at least two completions per group to compare; max_batches_offpolicy 0 gives atroposlib no worker
# at all: a run sat at step 0 for 5 minutes).
CORE_MINIMUMS = {
    "group_size": 2,
    "batch_size": 1,
    "total_steps": 1,
    "max_token_length": 1,
    "steps_per_eval": 1,
    "max_batches_offpolicy": 1,
}


class IntrospectionError(UserError):
    """The environment could not be imported or configured; the message ends with its traceback."""


@dataclass(frozen=True)
class FieldSpec:
    """One config field as the child process reported it."""

    name: str
    # verifiers: load_environment's arguments (or its EnvConfig); task: a reasoning-gym task's generator settings
    section: Literal["env", "tinker", "verifiers", "task"]
    type: str
    default: Any
    description: str | None
    json_schema: dict[str, Any]


@dataclass(frozen=True)
class ConfigSchema:
    """An environment's config fields (env section) plus the editable training fields."""

    environment: str
    config_class: str
    fields: dict[str, FieldSpec]
    defs: dict[str, Any] = field(default_factory=dict)
    training_error: str | None = None
    task: str | None = None  # a reasoning-gym task environment's task (its run sets `task` and `task_config`)
    # a verifiers environment's {"verifiers_file": path} or, installed, {"verifiers_module": name}: its run's
    verifiers_source: dict[str, str] | None = None
    # what the server sets in each run of a hosted environment: an MCP tool server's mcp_server,
    # tool_servers_file, default_tasks_file; an OpenEnv environment's folder and Python, or URL
    host_source: dict[str, str] | None = None

    def field_schema(self, name: str) -> dict[str, Any]:
        """A self-contained JSON schema for one field (with the model's $defs)."""
        spec = self.fields[name]
        return {**spec.json_schema, "$defs": self.defs} if self.defs else dict(spec.json_schema)

    def to_json(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "config_class": self.config_class,
            "fields": {n: asdict(f) for n, f in self.fields.items()},
            "defs": self.defs,
            "training_error": self.training_error,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConfigSchema:
        return cls(
            environment=data["environment"],
            config_class=data["config_class"],
            fields={n: FieldSpec(**f) for n, f in data["fields"].items()},
            defs=data.get("defs") or {},
            training_error=data.get("training_error"),
        )


def _with_core_bounds(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Add the lower bounds a run needs to BaseEnvConfig's unconstrained integers."""
    schema = spec["json_schema"]
    if name in CORE_MINIMUMS and schema.get("type") == "integer" and "minimum" not in schema:
        spec = {**spec, "json_schema": {**schema, "minimum": CORE_MINIMUMS[name]}}
    return spec


def _trainer_config_file() -> Path:
    return TRAINER_PACKAGE_DIR / "trainer" / "config.py"


def _cache_key(info: EnvironmentInfo | None, installed: tuple[int, ...]) -> str:
    """The key of an environment's cached fields (None: the product's own fields); `installed`: what is
    installed where the child imports from (a loss registered by a package installed since widens
    `loss_fn`'s choices)."""
    parts = [CACHE_VERSION, str(info.file), info.class_name] if info else [CACHE_VERSION, PRODUCT_FIELDS]
    parts.append(",".join(map(str, installed)))
    for path in ([info.file] if info else []) + [_trainer_config_file()]:
        try:
            st = path.stat()
            parts.append(f"{st.st_mtime_ns}:{st.st_size}")
        except OSError:
            parts.append("-")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


# The environment class a verifiers run's environment process runs (its fields are every verifiers run's).
VERIFIERS_HOST = EnvironmentInfo(
    name="verifiers",
    class_name=HOST_CLASS,
    file=HOST_FILE,
    env_dir=HOST_FILE.parent,
    line=0,
    description="",
    config_class="VerifiersHostConfig",
)


class Introspector:
    """Runs the introspection child, bounded by a timeout; caches answers by file mtime."""

    def __init__(self, settings: Settings, packages: EnvPackages | None = None) -> None:
        self.settings = settings
        # an environment folder's file is imported in its own venv, installed first
        self.packages = packages or EnvPackages(settings.home, settings.environ, settings.python)
        self.cache_dir = settings.cache_dir / "introspect"
        self._memory: dict[str, ConfigSchema] = {}
        self._lock = anyio.Lock()

    def cached(self, info: EnvironmentInfo) -> ConfigSchema | None:
        if info.format in FORMATS:
            host = self._cached(self._key(VERIFIERS_HOST))
            return None if host is None else verifiers_schema(info, host, self._venv(info))
        found = self._cached(self._key(info))  # a hosted environment's key is its host class's
        return None if found is None else self._specialized(info, found)

    def _key(self, info: EnvironmentInfo | None) -> str:
        return _cache_key(info, packages_stamp(self.settings.python, self.settings.environ))

    def _specialized(self, info: EnvironmentInfo, found: ConfigSchema) -> ConfigSchema:
        """A reasoning-gym task's or a tool server's fields, from its host environment's."""
        if info.task:
            return task_schema(info, found)
        if info.server:
            servers = servers_path(self.settings.environ, self.settings.home)
            source = mcp_format.run_source(self.settings.home, servers, info.server)
            return hosted_schema(info, found, source, mcp_format.SET_BY_SERVER)
        if info.openenv is not None:
            venv = self.packages.venv(info.package) if info.package else None
            python = venv / "bin" / "python" if venv else OPENENV.python(self.settings.environ)
            source = openenv_format.run_source(info.openenv.folder, info.openenv.url, str(python))
            return hosted_schema(info, found, source, openenv_format.SET_BY_SERVER)
        return found

    def _cached(self, key: str) -> ConfigSchema | None:
        hit = self._memory.get(key)
        if hit is not None:
            return hit
        path = self.cache_dir / f"{key}.json"
        try:
            schema = ConfigSchema.from_json(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None
        self._memory[key] = schema
        return schema

    def _venv(self, info: EnvironmentInfo) -> Path | None:
        """An environment folder's own venv (its run's verifiers child runs there), else None."""
        return self.packages.venv(info.package) if info.package is not None else None

    async def schema(self, info: EnvironmentInfo) -> ConfigSchema:
        """The config schema of `info`, from cache or a fresh child process."""
        if info.format in FORMATS:
            return verifiers_schema(info, await self._schema(VERIFIERS_HOST), self._venv(info))
        return self._specialized(info, await self._schema(_host(info)))

    async def _schema(self, info: EnvironmentInfo | None) -> ConfigSchema:
        """An environment's schema (None: the product's own fields), from cache or a child process."""
        key = self._key(info)
        if (hit := self._cached(key)) is not None:
            return hit
        async with self._lock:  # one child at a time: each costs seconds of CPU
            if (hit := self._cached(key)) is not None:
                return hit
            data = await self._run_child(info)
            schema = ConfigSchema(
                environment=info.name if info else "",
                config_class=data["config_class"],
                fields={n: FieldSpec(name=n, **_with_core_bounds(n, f)) for n, f in data["fields"].items()},
                defs=data.get("defs") or {},
                training_error=data.get("training_error"),
            )
            self._memory[key] = schema
            atomic_write_text(self.cache_dir / f"{key}.json", json.dumps(schema.to_json()))
            return schema

    async def _run_child(self, info: EnvironmentInfo | None) -> dict[str, Any]:
        args = [str(info.file), info.class_name] if info else [PRODUCT_FIELDS]
        fmt, package = (info.format, info.package) if info else ("atropos", None)
        await ensure_runtime("training", self.settings.environ)  # made already where a tool reports it
        runtime = await self.packages.runtime(info.name if info else "", fmt, package)
        warm_start.prepare(self.settings.python, self.settings.environ)  # for the run a selection leads to
        cmd = [runtime.python, "-m", "rl_mcp.children.introspect", *args]
        what = f"environment {info.name!r} ({info.file}, class {info.class_name})" if info else _PRODUCT_WHAT
        fix = "Fix the file and select it again" if info else "Check the server's venv (mcp-server-rl doctor)"
        cwd = info.file.parent if info else self.settings.home
        # Reading a config needs no credentials: keys stay out of environment code run here.
        env = without_secrets(self.settings.environ)
        env.update(PYTHONUNBUFFERED="1", WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
        # A child forked from the template (started just above on a first selection) imports nothing:
        # ~0.3 CPU s where a cold one spends ~4 importing what the template imports anyway, beside it.
        await warm_start.wait_ready(runtime.python, env, warm_start.READY_WAIT_S)
        started = time.monotonic()
        try:
            with anyio.fail_after(self.settings.introspect_timeout_s), child_tmpdir(env) as child_env:
                code, out, err = await run_captured("introspection", cmd, env=child_env, cwd=cwd)
        except TimeoutError as exc:
            raise IntrospectionError(
                f"introspecting {what} took longer than "
                f"{self.settings.introspect_timeout_s:.0f} s and was stopped: does importing it block "
                "or download something? (raise RL_MCP_INTROSPECT_TIMEOUT if it is just slow)"
            ) from exc
        stdout = out.decode(errors="replace")
        stderr = err.decode(errors="replace")
        marker = stdout.rfind(RESULT_MARKER)
        if code != 0 or marker < 0:
            tail = "\n".join((stderr or stdout).strip().splitlines()[-TRACEBACK_TAIL_LINES:])
            if missing := explain(stderr or stdout, runtime.home):
                raise IntrospectionError(f"{what} failed to load: {missing}\nTraceback tail:\n{tail}")
            raise IntrospectionError(
                f"{what} failed to load "
                f"(exit code {code} after {time.monotonic() - started:.1f} s). "
                f"{fix}. Traceback tail:\n{tail}"
            )
        answer: dict[str, Any] = json.loads(stdout[marker + len(RESULT_MARKER) :])
        return answer


def verifiers_schema(info: EnvironmentInfo, host: ConfigSchema, venv: Path | None = None) -> ConfigSchema:
    """A verifiers environment's fields, read from its file now (section `verifiers`), then its host's
    (VerifiersHostEnv, less what the run sets); where a name is both, the environment's field is kept
    (as an Atropos config's is). `venv`: an environment folder's own, where its run's child runs."""
    found = read_file(info.file)
    if found is None or found.format != info.format:
        raise IntrospectionError(
            f"{info.file} no longer defines the {info.format} environment {info.name!r} (or no longer parses): "
            "fix it, or call rl_list_environments and select again"
        )
    hosted = {n: f for n, f in host.fields.items() if n not in SET_BY_HOST}
    fields: dict[str, FieldSpec] = {}
    for name, spec in found.fields.items():
        if name in hosted:
            shadows = f"hides the {hosted[name].section} field {name!r} of every run"
            spec = {**spec, "description": "; ".join(filter(None, [spec["description"], shadows]))}
        fields[name] = FieldSpec(name=name, section="verifiers", **spec)
    for name, host_spec in hosted.items():
        fields.setdefault(name, host_spec)
    return ConfigSchema(
        environment=info.name,
        config_class=found.config_class,
        fields=fields,
        defs=host.defs,
        training_error=host.training_error,
        verifiers_source={
            "verifiers_format": info.format,
            **({"verifiers_module": info.module} if info.module else {"verifiers_file": str(info.file)}),
            **({"verifiers_venv": str(venv)} if venv is not None else {}),
        },
    )


def task_schema(info: EnvironmentInfo, host: ConfigSchema) -> ConfigSchema:
    """A reasoning-gym task's fields: its host environment's (ReasoningGymEnv, less `task` and
    `task_config`, which the task sets), then the task generator's settings (section `task`)."""
    assert info.task is not None
    fields = {n: f for n, f in host.fields.items() if n not in SET_BY_TASK}
    for name, spec in task_fields(info.task).items():
        if name in fields:  # a generator setting named as a run field: the run's field wins, the setting is fixed
            continue
        fields[name] = FieldSpec(name=name, section="task", **spec)
    return ConfigSchema(
        environment=info.name,
        config_class=info.config_class,
        fields=fields,
        defs=host.defs,
        training_error=host.training_error,
        task=info.task,
    )


def _host(info: EnvironmentInfo) -> EnvironmentInfo:
    """The class whose fields an environment has: an OpenEnv environment's are OpenEnvEnv's, read in
    the product's venv (its folder is installed when a run or test needs it, not at a selection)."""
    return dataclasses.replace(info, package=None, openenv=None, format="hermes") if info.openenv else info


def hosted_schema(
    info: EnvironmentInfo, host: ConfigSchema, source: dict[str, str], set_by_server: tuple[str, ...]
) -> ConfigSchema:
    """A tool server's or an OpenEnv environment's fields: its host environment's (McpToolsEnv's,
    OpenEnvEnv's), less what the server sets for each run (`source`)."""
    return ConfigSchema(
        environment=info.name,
        config_class=host.config_class,
        fields={n: f for n, f in host.fields.items() if n not in set_by_server},
        defs=host.defs,
        training_error=host.training_error,
        host_source=source,
    )
