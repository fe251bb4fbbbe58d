"""What makes another program use a served model: Hermes' config (its provider block and a
HERMES_HOME written with it), its command line, and the `openai` client's lines (pure but for
writing that HERMES_HOME).

Hermes 0.19 headless against a local endpoint needs, in `$HERMES_HOME/config.yaml`: the model and
its provider, the provider's URL without model discovery, approvals off and no title generation;
and an empty `.no-bundled-skills` beside it. Then `hermes -t terminal,file -z PROMPT` prints the
final answer (measured 2026-12-07).

Hermes 0.19 refuses a model whose context is under 64,000 tokens ("below the minimum 64,000 required
by Hermes Agent", `agent/agent_init.py`), and it compresses a conversation only past that floor. So the
config states HERMES_CONTEXT: the served model's true window is smaller (SmolLM2's 8,192), and the
server answers a prompt past it with a 400 that gives both figures, a reply past it clamped. Hermes sends
no temperature (the server's default is 1.0): `extra_body` asks for greedy replies."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from tinker_atropos.run_files import ServedModelFiles, atomic_write_text

NO_SKILLS = ".no-bundled-skills"
TOOLSETS = "terminal,file"
API_KEY = "x"  # the served endpoint checks no key; Hermes and the openai client insist on one
HERMES_CONTEXT = 65536  # the least `model.context_length` Hermes 0.19 accepts (its minimum: 64,000)


def hermes_config(model: str, url: str) -> dict[str, Any]:
    """The config keys that point Hermes at `model` served at `url` (…/v1)."""
    return {
        "model": {"provider": "openai", "default": model, "context_length": HERMES_CONTEXT},
        "providers": {
            "openai": {"api": url, "api_key": API_KEY, "discover_models": False, "extra_body": {"temperature": 0}}
        },
        "approvals": {"mode": "off"},
        "auxiliary": {"title_generation": {"enabled": False}},
    }


def hermes_yaml(model: str, url: str) -> str:
    """`hermes_config` as YAML to paste into a config.yaml: its strings quoted (`off` would read as false)."""
    return (
        f"model:\n  provider: openai\n  default: {json.dumps(model)}\n  context_length: {HERMES_CONTEXT}\n"
        f"providers:\n  openai:\n    api: {json.dumps(url)}\n    api_key: {json.dumps(API_KEY)}\n"
        "    discover_models: false\n    extra_body:\n      temperature: 0\n"
        'approvals:\n  mode: "off"\n'
        "auxiliary:\n  title_generation:\n    enabled: false\n"
    )


def write_hermes_home(files: ServedModelFiles, model: str, url: str) -> Path:
    """A HERMES_HOME holding only this model's config: Hermes run with it uses the served model."""
    atomic_write_text(files.hermes_config, hermes_yaml(model, url))
    (files.hermes_home / NO_SKILLS).touch()
    return files.hermes_home


def hermes_command(home: Path, prompt: str = "Say hello") -> str:
    return f"HERMES_HOME={shlex.quote(str(home))} hermes -t {TOOLSETS} -z {shlex.quote(prompt)}"


def openai_lines(model: str, url: str) -> str:
    """The `openai` Python client's lines for any other program."""
    return (
        "from openai import OpenAI\n\n"
        f"client = OpenAI(base_url={json.dumps(url)}, api_key={json.dumps(API_KEY)})\n"
        f"reply = client.chat.completions.create(model={json.dumps(model)}, "
        'messages=[{"role": "user", "content": "Say hello"}])\n'
        "print(reply.choices[0].message.content)\n"
    )
