"""Config introspection: an environment's fields, from a short-lived child process.

The child (`python -m rl_mcp.children.introspect FILE CLASS`) imports the file, calls
`config_init()` and prints JSON; import side effects, heavy dependencies and crashes stay there.
Its answer is cached by the file's mtime, in memory and on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import anyio

from rl_mcp.children.introspect import RESULT_MARKER
from rl_mcp.environments.discovery import EnvironmentInfo
from rl_mcp.errors import UserError
from rl_mcp.settings import PROJECT_ROOT, Settings, without_secrets
from rl_mcp.tmpdirs import child_tmpdir
from tinker_atropos.run_files import atomic_write_text

TRACEBACK_TAIL_LINES = 15
CACHE_VERSION = "2"  # bump when the shape of a cached introspection changes
# BaseEnvConfig leaves these unbounded, but a run cannot work below these values (GRPO needs
# at least two completions per group to compare).
CORE_MINIMUMS = {"group_size": 2, "batch_size": 1, "total_steps": 1, "max_token_length": 1, "steps_per_eval": 1}


class IntrospectionError(UserError):
    """The environment could not be imported or configured; the message ends with its traceback."""


@dataclass(frozen=True)
class FieldSpec:
    """One config field as the child process reported it."""

    name: str
    section: Literal["env", "tinker"]
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
    return PROJECT_ROOT / "tinker-atropos" / "tinker_atropos" / "config.py"


def _cache_key(info: EnvironmentInfo) -> str:
    parts = [CACHE_VERSION, str(info.file), info.class_name]
    for path in (info.file, _trainer_config_file()):
        try:
            st = path.stat()
            parts.append(f"{st.st_mtime_ns}:{st.st_size}")
        except OSError:
            parts.append("-")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


class Introspector:
    """Runs the introspection child, bounded by a timeout; caches answers by file mtime."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.cache_dir = settings.cache_dir / "introspect"
        self._memory: dict[str, ConfigSchema] = {}
        self._lock = anyio.Lock()

    def cached(self, info: EnvironmentInfo) -> ConfigSchema | None:
        key = _cache_key(info)
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
        if (hit := self.cached(info)) is not None:
            return hit
        async with self._lock:  # one child at a time: each costs seconds of CPU
            if (hit := self.cached(info)) is not None:
                return hit
            data = await self._run_child(info)
            schema = ConfigSchema(
                environment=info.name,
                config_class=data["config_class"],
                fields={n: FieldSpec(name=n, **_with_core_bounds(n, f)) for n, f in data["fields"].items()},
                defs=data.get("defs") or {},
                training_error=data.get("training_error"),
            )
            key = _cache_key(info)
            self._memory[key] = schema
            atomic_write_text(self.cache_dir / f"{key}.json", json.dumps(schema.to_json()))
            return schema

    async def _run_child(self, info: EnvironmentInfo) -> dict[str, Any]:
        cmd = [self.settings.python, "-m", "rl_mcp.children.introspect", str(info.file), info.class_name]
        # Reading a config needs no credentials: keys stay out of environment code run here.
        env = without_secrets(self.settings.environ)
        env.update(PYTHONUNBUFFERED="1", WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(self.settings.project_root), env.get("PYTHONPATH", "")) if p
        )
        started = time.monotonic()
        try:
            with anyio.fail_after(self.settings.introspect_timeout_s), child_tmpdir(env) as child_env:
                proc = await anyio.run_process(
                    cmd, env=child_env, check=False, cwd=str(info.file.parent), stdin=subprocess.DEVNULL
                )
        except TimeoutError as exc:
            raise IntrospectionError(
                f"introspecting {info.name!r} ({info.file}) took longer than "
                f"{self.settings.introspect_timeout_s:.0f} s and was stopped: does importing it block "
                "or download something? (raise RL_MCP_INTROSPECT_TIMEOUT if it is just slow)"
            ) from exc
        stdout = proc.stdout.decode(errors="replace")
        stderr = proc.stderr.decode(errors="replace")
        marker = stdout.rfind(RESULT_MARKER)
        if proc.returncode != 0 or marker < 0:
            tail = "\n".join((stderr or stdout).strip().splitlines()[-TRACEBACK_TAIL_LINES:])
            raise IntrospectionError(
                f"environment {info.name!r} ({info.file}, class {info.class_name}) failed to load "
                f"(exit code {proc.returncode} after {time.monotonic() - started:.1f} s). "
                f"Fix the file and select it again. Traceback tail:\n{tail}"
            )
        answer: dict[str, Any] = json.loads(stdout[marker + len(RESULT_MARKER) :])
        return answer
