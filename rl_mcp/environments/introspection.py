"""Config introspection: an environment's fields, from a short-lived child process.

The child (`python -m rl_mcp.children.introspect FILE CLASS`) imports the file, calls
`config_init()` and prints JSON; import side effects, heavy dependencies and crashes stay there.
Its answer is cached by the file's mtime, in memory and on disk.

The class the child reads is the one its format names (`fields_of`: the environment's own, or the
host class that runs it), and the format makes the environment's fields from what was read (`schema`:
a task's generator settings added, what a run sets taken out; a verifiers environment's own read from
its AST, since it can never be imported there).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import anyio

from rl_mcp import warm_start
from rl_mcp.children.introspect import RESULT_MARKER
from rl_mcp.environments.missing_module import explain
from rl_mcp.environments.packages.install import EnvPackages
from rl_mcp.environments.records import ConfigSchema, EnvironmentInfo, FieldSpec, IntrospectionError
from rl_mcp.formats import FORMATS
from rl_mcp.formats.base import FieldPlaces
from rl_mcp.processes import run_captured
from rl_mcp.runtimes import ensure_runtime
from rl_mcp.settings import TRAINER_PACKAGE_DIR, Settings, without_secrets
from rl_mcp.tmpdirs import child_tmpdir
from tinker_atropos.run_files import atomic_write_text
from tinker_atropos.venvs import packages_stamp

TRACEBACK_TAIL_LINES = 15
CACHE_VERSION = "4"  # bump when the shape of a cached introspection changes
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


def _with_core_bounds(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Add the lower bounds a run needs to BaseEnvConfig's unconstrained integers."""
    schema = spec["json_schema"]
    if name in CORE_MINIMUMS and schema.get("type") == "integer" and "minimum" not in schema:
        spec = {**spec, "json_schema": {**schema, "minimum": CORE_MINIMUMS[name]}}
    return spec


def _trainer_config_file() -> Path:
    return TRAINER_PACKAGE_DIR / "trainer" / "config.py"


def _cache_key(info: EnvironmentInfo, installed: tuple[int, ...]) -> str:
    """The key of an environment's cached fields; `installed`: what is installed where the child imports
    from (a loss registered by a package installed since widens `loss_fn`'s choices)."""
    parts = [CACHE_VERSION, str(info.file), info.class_name, ",".join(map(str, installed))]
    for path in (info.file, _trainer_config_file()):
        try:
            st = path.stat()
            parts.append(f"{st.st_mtime_ns}:{st.st_size}")
        except OSError:
            parts.append("-")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


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
        fmt = FORMATS[info.format]
        found = self._cached(self._key(fmt.fields_of(info)))  # a hosted environment's key is its host class's
        return None if found is None else fmt.schema(info, found, self._places)

    def _key(self, info: EnvironmentInfo) -> str:
        return _cache_key(info, packages_stamp(self.settings.python, self.settings.environ))

    @property
    def _places(self) -> FieldPlaces:
        return FieldPlaces(self.settings.home, self.settings.environ, self.packages.venv)

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

    async def schema(self, info: EnvironmentInfo) -> ConfigSchema:
        """The config schema of `info`, from cache or a fresh child process."""
        fmt = FORMATS[info.format]
        return fmt.schema(info, await self._schema(fmt.fields_of(info)), self._places)

    async def _schema(self, info: EnvironmentInfo) -> ConfigSchema:
        """The fields a class's config has, from cache or a child process."""
        key = self._key(info)
        if (hit := self._cached(key)) is not None:
            return hit
        async with self._lock:  # one child at a time: each costs seconds of CPU
            if (hit := self._cached(key)) is not None:
                return hit
            data = await self._run_child(info)
            schema = ConfigSchema(
                environment=info.name,
                config_class=data["config_class"],
                fields={n: FieldSpec(name=n, **_with_core_bounds(n, f)) for n, f in data["fields"].items()},
                defs=data.get("defs") or {},
                training_error=data.get("training_error"),
            )
            self._memory[key] = schema
            atomic_write_text(self.cache_dir / f"{key}.json", json.dumps(schema.to_json()))
            return schema

    async def _run_child(self, info: EnvironmentInfo) -> dict[str, Any]:
        await ensure_runtime("training", self.settings.environ)  # made already where a tool reports it
        runtime = await self.packages.runtime(info.name, info.format, info.package)
        warm_start.prepare(self.settings.python, self.settings.environ)  # for the run a selection leads to
        cmd = [runtime.python, "-m", "rl_mcp.children.introspect", str(info.file), info.class_name]
        what = f"environment {info.name!r} ({info.file}, class {info.class_name})"
        fix = "Fix the file and select it again"
        cwd = info.file.parent
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
