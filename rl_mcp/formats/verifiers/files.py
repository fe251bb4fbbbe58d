"""verifiers environments read from their AST: whether a file is one (classic or v1), its config fields.

verifiers can never be imported in the server's venv (its pins conflict with the server's), so a
file is parsed, never imported or run. It is a verifiers environment when it defines a top-level
`def load_environment(...)` and imports `verifiers` anywhere:

- `verifiers-v1` (verifiers >= 0.3, `verifiers.v1`: Taskset + Harness): it imports `verifiers.v1`
  (or `v1` from `verifiers`), `load_environment`'s first parameter is annotated with `EnvConfig` or a
  subclass of it, or a class in it subclasses one of verifiers' v1 bases (`V1_BASES`);
- `verifiers` (classic, verifiers <= 0.1.14: `load_environment(**kwargs) -> vf.Environment`) otherwise.

Config fields, in the shape the introspection child reports (type, default, description, JSON schema):
classic, `load_environment`'s parameters; v1, the annotated fields of its `EnvConfig` subclass in the
same file (a field typed with another config class of the file is an object of that class's fields).
A default is a literal `ast.literal_eval` reads, or a module-level constant assigned one; any other
default is left out (None) and named in the field's description.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rl_mcp.settings import TRAINER_PACKAGE_DIR

VerifiersFormat = Literal["verifiers", "verifiers-v1"]
CLASSIC: VerifiersFormat = "verifiers"
V1: VerifiersFormat = "verifiers-v1"
FORMATS: tuple[VerifiersFormat, ...] = (CLASSIC, V1)
ENTRY_POINT = "load_environment"
V1_CONFIG = "EnvConfig"
V1_BASES = frozenset({V1_CONFIG, "Taskset", "Harness", "TasksetConfig", "HarnessConfig"})
_V1_CONFIGS = frozenset({V1_CONFIG})
# the environment process of a verifiers run: it drives the environment in its own venv
HOST_FILE = TRAINER_PACKAGE_DIR / "verifiers" / "host_env.py"
HOST_CLASS = "VerifiersHostEnv"
SET_BY_HOST = (
    "verifiers_file",
    "verifiers_module",
    "verifiers_args",
    "verifiers_format",
    "verifiers_venv",
)  # the run's own: not fields a user edits

_SCALARS = {"int": "integer", "float": "number", "str": "string", "bool": "boolean", "None": "null", "NoneType": "null"}
_ARRAYS = frozenset({"list", "List", "Sequence", "tuple", "Tuple", "set", "Set"})
_OBJECTS = frozenset({"dict", "Dict", "Mapping"})
_FIELD_BOUNDS = {
    "ge": "minimum",
    "gt": "exclusiveMinimum",
    "le": "maximum",
    "lt": "exclusiveMaximum",
    "min_length": "minLength",
    "max_length": "maxLength",
}
_NO_VALUE = object()


@dataclass(frozen=True)
class VerifiersEnv:
    """What a verifiers environment file says about itself, read from its AST."""

    format: VerifiersFormat
    line: int
    description: str
    config_class: str  # `load_environment` (classic: its parameters) or the v1 EnvConfig class
    fields: dict[str, dict[str, Any]]  # name -> {type, default, description, json_schema}


def _name(node: ast.expr | None) -> str | None:
    """The last part of a dotted name (`vf.EnvConfig` -> EnvConfig), Generic[...] included."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    return None


def _verifiers_imports(tree: ast.Module) -> tuple[bool, bool]:
    """(imports verifiers at all, imports its v1 API), anywhere in the file."""
    any_, v1 = False, False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for module in modules:
            any_ = any_ or module == "verifiers" or module.startswith("verifiers.")
            v1 = v1 or module == "verifiers.v1" or module.startswith("verifiers.v1.")
    return any_, v1


@dataclass(frozen=True)
class _Module:
    """What a field's reading looks up: the file's classes and its module-level literal constants."""

    classes: dict[str, ast.ClassDef]
    constants: dict[str, Any]
    expanding: set[str] = field(default_factory=set)  # classes whose fields are being read (no recursion)


def _literal(node: ast.expr, mod: _Module | None = None) -> Any:
    """The JSON value of a literal (or of a module constant assigned one), else _NO_VALUE."""
    if mod is not None and isinstance(node, ast.Name) and node.id in mod.constants:
        return mod.constants[node.id]
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NO_VALUE
    value = list(value) if isinstance(value, tuple) else value
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return _NO_VALUE
    return value


def _module(tree: ast.Module) -> _Module:
    constants: dict[str, Any] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        else:
            continue
        if isinstance(target, ast.Name) and (literal := _literal(value)) is not _NO_VALUE:
            constants[target.id] = literal
    return _Module(classes={s.name: s for s in tree.body if isinstance(s, ast.ClassDef)}, constants=constants)


def _schema(node: ast.expr | None, mod: _Module) -> dict[str, Any]:
    """The JSON schema an annotation implies ({} for anything: an unknown type accepts any value)."""
    if node is None:
        return {}
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        try:
            return _schema(ast.parse(node.value, mode="eval").body, mod)
        except SyntaxError:
            return {}
    if isinstance(node, ast.Constant) and node.value is None:
        return {"type": "null"}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _any_of([_schema(node.left, mod), _schema(node.right, mod)])
    if isinstance(node, ast.Subscript):
        outer, args = _name(node.value), node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer == "Optional":
            return _any_of([_schema(args[0], mod), {"type": "null"}])
        if outer == "Union":
            return _any_of([_schema(a, mod) for a in args])
        if outer == "Literal":
            values = [_literal(a) for a in args]
            return {"enum": values} if _NO_VALUE not in values else {}
        if outer == "Annotated":
            return _schema(args[0], mod)
        if outer in _ARRAYS:
            items = _schema(args[0], mod) if outer not in ("tuple", "Tuple") or len(args) == 1 else {}
            return {"type": "array", **({"items": items} if items else {})}
        return _simple(outer or "")
    name = _name(node) or ""
    if name in mod.classes:  # a config class of the file: an object of its fields
        fields = _class_fields(name, mod) if name not in mod.expanding else {}
        return {
            "type": "object",
            **({"properties": {n: f["json_schema"] for n, f in fields.items()}} if fields else {}),
        }
    return _simple(name)


def _simple(name: str) -> dict[str, Any]:
    """The schema of a bare type name (`list[...]` and `dict[...]` by their outer name)."""
    if name in _SCALARS:
        return {"type": _SCALARS[name]}
    return {"type": "array"} if name in _ARRAYS else {"type": "object"} if name in _OBJECTS else {}


def _any_of(options: list[dict[str, Any]]) -> dict[str, Any]:
    flat = [o for option in options for o in option.get("anyOf", [option])]
    return {} if {} in flat else {"anyOf": flat}


def _from_default(value: Any) -> dict[str, Any]:
    """The schema of an unannotated parameter, from its default's type."""
    kinds = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object"))
    for kind, schema in kinds:
        if isinstance(value, kind):
            return {"type": schema}
    return {}


def _field(annotation: ast.expr | None, default: ast.expr | None, mod: _Module, doc: str = "") -> dict[str, Any]:
    """One field: its type as written, its default (literal or None), description and JSON schema."""
    schema = _schema(annotation, mod)
    value = _NO_VALUE if default is None else _literal(default, mod)
    if isinstance(default, ast.Call) and value is _NO_VALUE:
        value, schema, doc = _call_default(default, mod, schema, doc)
    if annotation is None and value is not _NO_VALUE:
        schema = _from_default(value)
    notes = [doc] if doc else []
    if default is None:
        notes.append("required: it has no default")
    elif value is _NO_VALUE:
        notes.append(f"default set in the file: `{ast.unparse(default)}`")
    value = None if value is _NO_VALUE else value
    if value is None and default is not None and schema and '"null"' not in json.dumps(schema):
        schema = _any_of([schema, {"type": "null"}])
    type_text = ast.unparse(annotation) if annotation is not None else type(value).__name__ if schema else "any"
    return {"type": type_text, "default": value, "description": "; ".join(notes) or None, "json_schema": schema}


def _call_default(call: ast.Call, mod: _Module, schema: dict[str, Any], doc: str) -> tuple[Any, dict[str, Any], str]:
    """A default that is a call: pydantic's `Field(default, description=, ge=, ...)`, or a config
    class built with literal keywords (its value: the class's known defaults and those keywords)."""
    called = _name(call.func) or ""
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    if called == "Field":
        default = call.args[0] if call.args else keywords.get("default")
        value = _NO_VALUE if default is None else _literal(default, mod)
        bounds = {_FIELD_BOUNDS[k]: _literal(v, mod) for k, v in keywords.items() if k in _FIELD_BOUNDS}
        schema = {**schema, **{k: v for k, v in bounds.items() if v is not _NO_VALUE}}
        described = _literal(keywords["description"], mod) if "description" in keywords else doc
        return value, schema, described if isinstance(described, str) else doc
    values = {k: _literal(v, mod) for k, v in keywords.items()}
    is_config = called in mod.classes or called.endswith("Config")  # e.g. vf.HarnessConfig(max_turns=8)
    if not is_config or call.args or _NO_VALUE in values.values():
        return _NO_VALUE, schema, doc
    known = {n: f["default"] for n, f in _class_fields(called, mod).items()}
    return {**known, **values}, schema or {"type": "object"}, doc


def _class_fields(name: str, mod: _Module) -> dict[str, dict[str, Any]]:
    """A config class's annotated fields, its bases' in the same file first (pydantic's order); a
    class met again while its fields are read (a recursive config) is an object of unknown fields."""
    cls = mod.classes.get(name)
    if cls is None or name in mod.expanding:
        return {}
    mod.expanding.add(name)
    try:
        out: dict[str, dict[str, Any]] = {}
        for base in cls.bases:
            out.update(_class_fields(_name(base) or "", mod))
        for stmt in cls.body:
            if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                continue
            if _name(stmt.annotation) == "ClassVar" or stmt.target.id.startswith("_"):
                continue
            out[stmt.target.id] = _field(stmt.annotation, stmt.value, mod)
        return out
    finally:
        mod.expanding.discard(name)


def _descriptions(doc: str) -> dict[str, str]:
    """Parameter descriptions from a docstring: Google style (`Args:` then `name (type): text`) or
    Sphinx style (`:param name: text`)."""
    out: dict[str, str] = {}
    for match in re.finditer(r"^\s*:param\s+(?:\S+\s+)?(\w+):\s*(.+)$", doc, re.MULTILINE):
        out[match.group(1)] = match.group(2).strip()
    section = re.search(r"^\s*(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+\S.*\n?)+)", doc, re.MULTILINE)
    for match in re.finditer(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)$", section.group(1) if section else "", re.MULTILINE):
        out.setdefault(match.group(1), match.group(2).strip())
    return out


def _parameters(func: ast.FunctionDef, mod: _Module) -> dict[str, dict[str, Any]]:
    """load_environment's parameters (not *args / **kwargs) as fields."""
    args = func.args
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    docs = _descriptions(ast.get_docstring(func) or "")
    pairs = [*zip(positional, defaults, strict=True), *zip(args.kwonlyargs, args.kw_defaults, strict=True)]
    return {arg.arg: _field(arg.annotation, default, mod, docs.get(arg.arg, "")) for arg, default in pairs}


def _reaches(name: str, targets: frozenset[str], mod: _Module, seen: frozenset[str] = frozenset()) -> bool:
    """Whether class `name` is one of `targets` or subclasses one, following bases through the file."""
    if name in targets:
        return True
    cls = mod.classes.get(name)
    if cls is None or name in seen:
        return False
    return any(_reaches(_name(b) or "", targets, mod, seen | {name}) for b in cls.bases)


def _v1_config_class(entry: ast.FunctionDef, mod: _Module) -> str | None:
    """The EnvConfig class `load_environment` takes: its first parameter's annotation, else the
    file's own EnvConfig subclass (`load_environment(config: vf.EnvConfig)` beside one)."""
    first = [*entry.args.posonlyargs, *entry.args.args][:1]
    annotated = _name(first[0].annotation) if first else None
    if annotated and annotated != V1_CONFIG and _reaches(annotated, _V1_CONFIGS, mod):
        return annotated
    own = [n for n in mod.classes if n != V1_CONFIG and _reaches(n, _V1_CONFIGS, mod)]
    return own[0] if own else annotated if annotated == V1_CONFIG else None


def read_module(tree: ast.Module) -> VerifiersEnv | None:
    """The verifiers environment a parsed module defines, or None when it is not one."""
    entry = next((s for s in tree.body if isinstance(s, ast.FunctionDef) and s.name == ENTRY_POINT), None)
    imports_any, imports_v1 = _verifiers_imports(tree)
    if entry is None or not imports_any:
        return None
    mod = _module(tree)
    doc = (ast.get_docstring(entry) or ast.get_docstring(tree) or "").strip()
    description = doc.splitlines()[0] if doc else ""
    config_class = _v1_config_class(entry, mod)
    if imports_v1 or config_class or any(_reaches(n, V1_BASES, mod) for n in mod.classes):
        name = config_class or V1_CONFIG
        fields = _class_fields(name, mod)
        return VerifiersEnv(format=V1, line=entry.lineno, description=description, config_class=name, fields=fields)
    fields = _parameters(entry, mod)
    return VerifiersEnv(
        format=CLASSIC, line=entry.lineno, description=description, config_class=ENTRY_POINT, fields=fields
    )


def read_file(path: Path) -> VerifiersEnv | None:
    """`read_module` of a file; None when it cannot be parsed (discovery reports that) or is not one."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return None
    return read_module(tree)
