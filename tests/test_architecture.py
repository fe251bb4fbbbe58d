"""The layout's rules, checked on the source: one-way dependencies, no import cycles, the server
importing only the light modules of the trainer's package, and the run-file contract in one module.
A module's size is judged by its cohesion in review, not by a line count here."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"rl_mcp": ROOT / "rl_mcp", "tinker_atropos": ROOT / "tinker-atropos" / "tinker_atropos"}
# rl_mcp's layers, lowest first: a module may import its own layer and the ones below it.
LAYERS = [
    (
        "files/settings",
        (
            "rl_mcp.errors",
            "rl_mcp.settings",
            "rl_mcp.logs",
            "rl_mcp.statelock",
            "rl_mcp.tmpdirs",
            "rl_mcp.interrupts",
            "rl_mcp.distribution",
            "rl_mcp.from_domain",
            "rl_mcp.http_bound",
        ),
    ),
    (
        "domain",
        (
            "rl_mcp.processes",
            "rl_mcp.model_build",
            "rl_mcp.plots",
            "rl_mcp.environments",
            "rl_mcp.formats",
            "rl_mcp.session",
            "rl_mcp.runs",
            "rl_mcp.inference",
            "rl_mcp.children",
            "rl_mcp.export",
            "rl_mcp.diagnosis",
            "rl_mcp.engines",
            "rl_mcp.tool_servers",
            "rl_mcp.warm_start",
            "rl_mcp.sft",
            "rl_mcp.runtimes",
            "rl_mcp.distill",
            "rl_mcp.serving",
        ),
    ),
    ("app wiring", ("rl_mcp.app",)),
    ("MCP adapters", ("rl_mcp.mcp_api",)),
    (
        "cli",
        (
            "rl_mcp.cli",
            "rl_mcp.demo",
            "rl_mcp.doctor",
            "rl_mcp.export_cli",
            "rl_mcp.serve_model_cli",
            "rl_mcp.compare_cli",
            "rl_mcp.setup_cli",
            "rl_mcp.examples_cli",
            "rl_mcp.__main__",
        ),
    ),
]
# What the server process may import of the trainer's package: light modules (stdlib, yaml, httpx, pydantic).
SERVER_SAFE_TRAINER_MODULES = {
    "tinker_atropos",
    "tinker_atropos.agent",
    "tinker_atropos.agent.trajectory",
    "tinker_atropos.best_checkpoint",
    "tinker_atropos.distill",
    "tinker_atropos.distill.tokenizers",
    "tinker_atropos.export",
    "tinker_atropos.export.hub",
    "tinker_atropos.export.model_facts",
    "tinker_atropos.hermes_harness",
    "tinker_atropos.hermes_harness.hermes_config",
    "tinker_atropos.hermes_harness.task_set",
    "tinker_atropos.http_tls",
    "tinker_atropos.mcp_tools",
    "tinker_atropos.mcp_tools.servers_file",
    "tinker_atropos.mcp_tools.tasks",
    "tinker_atropos.mcp_tools.tool_policy",
    "tinker_atropos.models.paths",
    "tinker_atropos.openenv",
    "tinker_atropos.openenv.folder",
    "tinker_atropos.owner",
    "tinker_atropos.plugins",
    "tinker_atropos.models.smollm2_wheel",
    "tinker_atropos.reply_cap",
    "tinker_atropos.request_timeouts",
    "tinker_atropos.run_files",
    "tinker_atropos.verifiers",
    "tinker_atropos.venvs",
    "tinker_atropos.vllm_server.kv_cache",
    "tinker_atropos.warm_fork",
}
# mcp_api: one folder per tool family beside the modules the families share; server.py lists them.
MCP_API = "rl_mcp.mcp_api"
MCP_SERVER = "rl_mcp.mcp_api.server"
# What a tool family's folder may hold: its tools, the resources and prompts it serves, their descriptions.
FAMILY_FILES = {"__init__", "tools", "descriptions", "resources", "prompts"}
# The pydantic models of mcp_api that are MCP's own, not an answer: the spend gate's elicitation form.
ADAPTER_MODELS = {"ConfirmSpend"}
RUN_FILE_NAMES = {"metrics.jsonl", "eval.jsonl", "result.json", "checkpoints.jsonl", "config.yaml"}


def modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module of the two packages that `name` imports, anywhere in the file (function-level
    and TYPE_CHECKING imports included)."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import a.b.c` imports a.b.c; an attribute maps to its module
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports(name, path, known)) for name, path in known.items()}


def layer_of(module: str) -> int | None:
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return index
    return None


def test_every_rl_mcp_module_has_a_layer() -> None:
    unplaced = [m for m in modules() if m.startswith("rl_mcp.") and layer_of(m) is None]
    assert unplaced == [], f"add these to LAYERS (and docs/architecture.md): {unplaced}"


def test_no_import_cycles(graph: dict[str, set[str]]) -> None:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_dependencies_run_one_way(graph: dict[str, set[str]]) -> None:
    upward = []
    for module, targets in graph.items():
        here = layer_of(module)
        if here is None:
            continue
        for target in targets:
            there = layer_of(target)
            if there is not None and there > here:
                upward.append(f"{module} ({LAYERS[here][0]}) imports {target} ({LAYERS[there][0]})")
    assert upward == []


# Literals equal to a format's name that name something else: a runtime of the catalog (its own
# extension point, named as the format it serves) and a Python distribution.
NOT_A_FORMAT = {("rl_mcp.runtimes.catalog", name) for name in ("verifiers", "verifiers-v1", "openenv", "hermes")} | {
    ("rl_mcp.doctor", "mcp")
}


def test_a_format_is_spelled_only_in_its_folder_and_the_registry(graph: dict[str, set[str]]) -> None:
    """The rest of the product asks the registry (rl_mcp/formats/__init__.py): no module outside a
    format's folder compares with its name or imports its folder."""
    from rl_mcp.formats import BUILT_IN, FORMATS

    folders = {f.name: type(f).__module__ for f in BUILT_IN}
    on_disk = {p.parent.name for p in (ROOT / "rl_mcp" / "formats").glob("*/__init__.py")}
    assert set(FORMATS) >= set(folders) and {m.split(".")[2] for m in folders.values()} == on_disk  # each folder one

    def inside(module: str, folder: str) -> bool:
        return module == folder or module.startswith(folder + ".")

    spelled = []
    for module, path in modules().items():
        if not module.startswith("rl_mcp.") or module == "rl_mcp.formats":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Constant) and node.value in folders):
                continue
            if (module, node.value) not in NOT_A_FORMAT and not inside(module, folders[node.value]):
                spelled.append(f"{module}:{node.lineno} spells {node.value!r}")
        for target in graph[module]:
            owner = next((folder for folder in folders.values() if inside(target, folder)), None)
            if owner is not None and not inside(module, owner):
                spelled.append(f"{module} imports {target}")
    assert spelled == []


def is_tool_family(folder: Path) -> bool:
    """A folder of mcp_api that describes tools of its own; a folder without descriptions.py is a
    shared room (findings, env_health), which the families may import."""
    return (folder / "descriptions.py").is_file()


def tool_family(module: str) -> str | None:
    """The tool family (a folder of mcp_api) a module belongs to; None outside one."""
    parts = module.split(".")
    if len(parts) < 3 or ".".join(parts[:2]) != MCP_API:
        return None
    return parts[2] if is_tool_family(PACKAGES["rl_mcp"] / "mcp_api" / parts[2]) else None


def test_tool_families_import_only_shared_modules(graph: dict[str, set[str]]) -> None:
    """A family's modules import mcp_api's shared modules and the layers below, never another family
    (nor server.py); the shared modules import no family: server.py alone gathers them."""
    assert {tool_family(m) for m in graph} > {None}, "no tool family found under mcp_api/"
    crossing = []
    for module, targets in graph.items():
        if not module.startswith(MCP_API):
            continue
        here = tool_family(module)
        for target in targets:
            there = tool_family(target)
            if here is not None and (target == MCP_SERVER or there not in (None, here)):
                crossing.append(f"{module} (family {here}) imports {target}")
            elif here is None and there is not None and module != MCP_SERVER:
                crossing.append(f"{module} (shared) imports {target} (family {there})")
    assert crossing == []


def test_a_tool_family_is_its_tools_beside_their_descriptions() -> None:
    """A family's folder holds its tools (and the resources or prompts it serves) beside what they say to
    the agent: the answers, how they are built from the domain and the next step they suggest live in
    the domain's rooms, where tests call them without MCP."""
    top = PACKAGES["rl_mcp"] / "mcp_api"
    families = [folder for folder in top.iterdir() if folder.is_dir() and is_tool_family(folder)]
    assert len(families) >= 8
    extra = sorted(
        f"{folder.name}/{p.name}" for folder in families for p in folder.glob("*.py") if p.stem not in FAMILY_FILES
    )
    assert extra == [], (
        "a family is tools.py + descriptions.py (+ resources.py, prompts.py): move the rest to a domain room"
    )
    answers = sorted(
        f"{path.relative_to(top)}: {node.name}"
        for path in top.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and node.name not in ADAPTER_MODELS
        and any(isinstance(b, ast.Name) and b.id == "BaseModel" for b in node.bases)
    )
    assert answers == [], "an answer model belongs to the domain room it describes"


def test_only_the_mcp_layer_and_the_cli_speak_mcp() -> None:
    mcp_layers = {3, 4}
    offenders = []
    for module, path in modules().items():
        if not module.startswith("rl_mcp.") or layer_of(module) in mcp_layers:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            offenders += [f"{module}: {n}" for n in names if n.split(".")[0] in ("mcp", "mcp_types")]
    assert offenders == []


def test_the_server_imports_only_stdlib_modules_of_the_trainer(graph: dict[str, set[str]]) -> None:
    reached = {
        target
        for module, targets in graph.items()
        if module.startswith("rl_mcp.") and not module.startswith("rl_mcp.children")
        for target in targets
        if target.startswith("tinker_atropos")
    }
    assert reached <= SERVER_SAFE_TRAINER_MODULES
    for module in SERVER_SAFE_TRAINER_MODULES:  # and those import nothing else of the package
        assert {t for t in graph[module] if t.startswith("tinker_atropos")} <= SERVER_SAFE_TRAINER_MODULES


def test_run_file_names_are_spelled_only_in_the_contract() -> None:
    spelled = []
    for module, path in modules().items():
        if module == "tinker_atropos.run_files":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in RUN_FILE_NAMES:
                spelled.append(f"{module}:{node.lineno} {node.value!r}")
    assert spelled == [], "use tinker_atropos.run_files (RunFiles, InferenceTestFiles)"
