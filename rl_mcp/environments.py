"""Environment discovery (AST, nothing imported) and config introspection (a child process).

The server never imports environment code: files are parsed with `ast`, and the config fields
come from a short-lived `python -m rl_mcp.environments FILE CLASS` child that imports the file,
calls `config_init()` and prints JSON. Import side effects, heavy dependencies and crashes stay
in the child; its answer is cached by the file's mtime (memory and disk).
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from .settings import BUNDLED_ENV_DIR, PROJECT_ROOT, Settings, without_secrets

BASE_CLASS = "BaseEnv"
MAX_SCAN_DEPTH = 3
TRACEBACK_TAIL_LINES = 15
CACHE_VERSION = "2"  # bump when the shape of a cached introspection changes
# Training fields (TinkerConfig) an agent may edit; the rest are set per run or by the profile.
TRAINING_FIELDS = (
    "lora_rank",
    "learning_rate",
    "beta1",
    "beta2",
    "eps",
    "weight_decay",
    "grad_clip_norm",
    "max_token_trainer_length",
    "seed",
    "wandb_project",
    "wandb_group",
)

# BaseEnvConfig leaves these unbounded, but a run cannot work below these values (GRPO needs
# at least two completions per group to compare).
CORE_MINIMUMS = {"group_size": 2, "batch_size": 1, "total_steps": 1, "max_token_length": 1, "steps_per_eval": 1}


class IntrospectionError(RuntimeError):
    """The environment could not be imported or configured; the message ends with its traceback."""


@dataclass(frozen=True)
class EnvironmentInfo:
    """One discovered environment class."""

    name: str
    class_name: str
    file: Path
    env_dir: Path
    line: int
    description: str
    config_class: str


@dataclass(frozen=True)
class Catalog:
    """The result of one scan: environments by name plus what could not be used."""

    environments: dict[str, EnvironmentInfo]
    shadowed: list[dict[str, str]]
    errors: list[dict[str, str]]
    env_dirs: tuple[Path, ...]


@dataclass(frozen=True)
class _ClassDef:
    name: str
    bases: tuple[str, ...]
    env_name: str | None
    docstring: str
    config_class: str | None
    abstract: bool
    line: int


@dataclass(frozen=True)
class _FileScan:
    classes: tuple[_ClassDef, ...]
    error: str | None = None


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):  # Generic[...] style bases
        return _dotted(node.value)
    return None


def _config_class(body: list[ast.stmt]) -> str | None:
    """`env_config_cls = X`, else the first `...Config(...)` call inside `config_init`."""
    for stmt in body:
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if any(isinstance(t, ast.Name) and t.id == "env_config_cls" for t in targets) and stmt.value:
                return _dotted(stmt.value)
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "config_init":
            for node in ast.walk(stmt):
                if isinstance(node, ast.Call) and (called := _dotted(node.func)) and called.endswith("Config"):
                    return called
    return None


def _class_attr_str(body: list[ast.stmt], attr: str) -> str | None:
    for stmt in body:
        value = None
        if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == attr for t in stmt.targets):
            value = stmt.value
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == attr:
            value = stmt.value
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value:
            return value.value
    return None


def _is_abstract(body: list[ast.stmt]) -> bool:
    for stmt in body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(_dotted(d) == "abstractmethod" for d in stmt.decorator_list):
                return True
    return False


def scan_file(path: Path) -> _FileScan:
    """Top-level classes of one file, or the reason it could not be parsed."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError) as exc:
        where = f" (line {exc.lineno})" if isinstance(exc, SyntaxError) and exc.lineno else ""
        return _FileScan(classes=(), error=f"{type(exc).__name__}: {getattr(exc, 'msg', None) or exc}{where}")
    module_doc = (ast.get_docstring(tree) or "").strip()
    classes = []
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        doc = (ast.get_docstring(node) or "").strip() or module_doc
        classes.append(
            _ClassDef(
                name=node.name,
                bases=tuple(b for b in (_dotted(base) for base in node.bases) if b),
                env_name=_class_attr_str(node.body, "name"),
                docstring=doc.splitlines()[0] if doc else "",
                config_class=_config_class(node.body),
                abstract=_is_abstract(node.body),
                line=node.lineno,
            )
        )
    return _FileScan(classes=tuple(classes))


def _python_files(root: Path) -> list[Path]:
    out: list[Path] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith((".", "_")) and len(here.parts) - base_depth < MAX_SCAN_DEPTH
        )
        out.extend(here / f for f in sorted(filenames) if f.endswith(".py") and not f.startswith("_"))
    return out


class Discovery:
    """Scans the env dirs; per-file parses are cached by (mtime, size) so a rescan is cheap."""

    def __init__(self, env_dirs: tuple[Path, ...]) -> None:
        self.env_dirs = env_dirs
        self._parsed: dict[Path, tuple[tuple[int, int], _FileScan]] = {}

    def _scan(self, path: Path) -> _FileScan:
        st = path.stat()
        key = (st.st_mtime_ns, st.st_size)
        hit = self._parsed.get(path)
        if hit and hit[0] == key:
            return hit[1]
        result = scan_file(path)
        self._parsed[path] = (key, result)
        return result

    def scan(self) -> Catalog:
        files: list[tuple[Path, Path, _FileScan]] = []
        errors: list[dict[str, str]] = []
        for env_dir in self.env_dirs:
            if not env_dir.is_dir():
                errors.append({"file": str(env_dir), "error": "environment directory does not exist"})
                continue
            for path in _python_files(env_dir):
                try:
                    scanned = self._scan(path)
                except OSError as exc:
                    scanned = _FileScan(classes=(), error=f"{type(exc).__name__}: {exc}")
                if scanned.error:
                    errors.append({"file": str(path), "error": scanned.error})
                files.append((env_dir, path, scanned))
        # A class is an environment if BaseEnv is among its ancestors, following bases by name
        # through every scanned file (so a shared base class in another file counts).
        by_name: dict[str, list[_ClassDef]] = {}
        for _, _, scanned in files:
            for cls in scanned.classes:
                by_name.setdefault(cls.name, []).append(cls)
        memo: dict[str, bool] = {}

        def is_env(name: str, seen: frozenset[str] = frozenset()) -> bool:
            if name == BASE_CLASS:
                return True
            if name in memo:
                return memo[name]
            if name in seen:
                return False
            result = any(is_env(b, seen | {name}) for c in by_name.get(name, ()) for b in c.bases)
            memo[name] = result
            return result

        used_as_base = {b for _, _, scanned in files for c in scanned.classes for b in c.bases}
        environments: dict[str, EnvironmentInfo] = {}
        shadowed: list[dict[str, str]] = []
        for env_dir, path, scanned in files:
            for cls in scanned.classes:
                if not any(is_env(b) for b in cls.bases):
                    continue
                if cls.abstract or (cls.name in used_as_base and cls.env_name is None):
                    continue  # a shared base class, not a runnable environment
                info = EnvironmentInfo(
                    name=cls.env_name or path.stem,
                    class_name=cls.name,
                    file=path,
                    env_dir=env_dir,
                    line=cls.line,
                    description=cls.docstring,
                    config_class=cls.config_class or "BaseEnvConfig",
                )
                kept = environments.get(info.name)
                if kept is None:
                    environments[info.name] = info
                else:  # first wins: env dirs in order, then path, then line
                    shadowed.append(
                        {
                            "name": info.name,
                            "file": str(info.file),
                            "class_name": info.class_name,
                            "shadowed_by": f"{kept.file}:{kept.class_name}",
                        }
                    )
        return Catalog(environments=environments, shadowed=shadowed, errors=errors, env_dirs=self.env_dirs)


def environment_list(catalog: Catalog, selected: str | None, next_step: str):
    """The rl_list_environments answer."""
    from .models import EnvironmentList, EnvironmentSummary, ScanProblem, ShadowedEnvironment

    return EnvironmentList(
        environments=[
            EnvironmentSummary(
                name=e.name,
                class_name=e.class_name,
                file=str(e.file),
                description=e.description,
                config_class=e.config_class,
                bundled=e.env_dir == BUNDLED_ENV_DIR,
            )
            for e in sorted(catalog.environments.values(), key=lambda e: e.name)
        ],
        selected=selected,
        shadowed=[ShadowedEnvironment(**s) for s in catalog.shadowed],
        errors=[ScanProblem(**e) for e in catalog.errors],
        env_dirs=[str(d) for d in catalog.env_dirs],
        next_step=next_step,
    )


# --- config introspection -------------------------------------------------------------------


@dataclass(frozen=True)
class FieldSpec:
    """One config field as the child process reported it."""

    name: str
    section: str  # "env" | "tinker"
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
        cmd = [self.settings.python, "-m", "rl_mcp.environments", str(info.file), info.class_name]
        # Reading a config needs no credentials: keys stay out of environment code run here.
        env = without_secrets(self.settings.environ)
        env.update(PYTHONUNBUFFERED="1", WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(self.settings.project_root), env.get("PYTHONPATH", "")) if p
        )
        started = time.monotonic()
        try:
            with anyio.fail_after(self.settings.introspect_timeout_s):
                proc = await anyio.run_process(
                    cmd, env=env, check=False, cwd=str(info.file.parent), stdin=subprocess.DEVNULL
                )
        except TimeoutError as exc:
            raise IntrospectionError(
                f"introspecting {info.name!r} ({info.file}) took longer than "
                f"{self.settings.introspect_timeout_s:.0f} s and was stopped: does importing it block "
                "or download something? (raise RL_MCP_INTROSPECT_TIMEOUT if it is just slow)"
            ) from exc
        stdout = proc.stdout.decode(errors="replace")
        stderr = proc.stderr.decode(errors="replace")
        marker = stdout.rfind(_RESULT_MARKER)
        if proc.returncode != 0 or marker < 0:
            tail = "\n".join((stderr or stdout).strip().splitlines()[-TRACEBACK_TAIL_LINES:])
            raise IntrospectionError(
                f"environment {info.name!r} ({info.file}, class {info.class_name}) failed to load "
                f"(exit code {proc.returncode} after {time.monotonic() - started:.1f} s). "
                f"Fix the file and select it again. Traceback tail:\n{tail}"
            )
        return json.loads(stdout[marker + len(_RESULT_MARKER) :])


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary sibling + rename: readers see the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# --- the child process ------------------------------------------------------------------------

_RESULT_MARKER = "\n@@RL_MCP_INTROSPECTION@@"


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or repr(annotation)
    return text.replace("typing.", "").replace("NoneType", "None")


def _model_fields(
    model: Any, values: dict[str, Any], section: str, only: tuple[str, ...] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each field of pydantic `model`: type, value, description and its JSON schema."""
    schema = model.model_json_schema(mode="validation")
    props = schema.get("properties", {})
    out = {}
    for name, info in model.model_fields.items():
        if only is not None and name not in only:
            continue
        out[name] = {
            "section": section,
            "type": _type_name(info.annotation),
            "default": values.get(name),
            "description": info.description,
            "json_schema": {k: v for k, v in props.get(name, {}).items() if k not in ("title", "description")},
        }
    return out, schema.get("$defs", {})


def _child_main(argv: list[str]) -> int:
    """Import FILE, call CLASS.config_init(), print every field as JSON after a marker."""
    import importlib.util

    file, class_name = Path(argv[0]).resolve(), argv[1]
    sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(f"_rl_mcp_env_{file.stem}", file)
    if spec is None or spec.loader is None:
        print(f"cannot load {file}", file=sys.stderr)
        return 1
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    cls = getattr(module, class_name)
    env_config, _servers = cls.config_init()
    fields, defs = _model_fields(type(env_config), env_config.model_dump(mode="json"), "env")
    training_error = None
    try:
        from tinker_atropos.config import TinkerConfig

        defaults = {
            name: info.get_default(call_default_factory=True)
            for name, info in TinkerConfig.model_fields.items()
            if not info.is_required()
        }
        tinker_fields, tinker_defs = _model_fields(TinkerConfig, defaults, "tinker", TRAINING_FIELDS)
        for name, spec_ in tinker_fields.items():
            fields.setdefault(name, spec_)
        defs.update(tinker_defs)
    except Exception as exc:  # the trainer side is optional for discovery; say why it is missing
        training_error = f"training fields unavailable: {type(exc).__name__}: {exc}"
    result = {
        "config_class": type(env_config).__name__,
        "fields": fields,
        "defs": defs,
        "training_error": training_error,
    }
    sys.stdout.write(_RESULT_MARKER + json.dumps(result, default=str))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
