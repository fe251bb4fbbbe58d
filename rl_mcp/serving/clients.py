"""What makes another program use a served model: Hermes' config (its provider block, written into a
HERMES_HOME: `tinker_atropos/hermes_harness/hermes_config.py`, which training episodes write too), its
command line, and the `openai` client's lines. Then `hermes -t terminal,file -z PROMPT` prints the final
answer (measured 2026-12-07)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from tinker_atropos.hermes_harness.hermes_config import config_yaml, provider_config, write_home
from tinker_atropos.run_files import ServedModelFiles

TOOLSETS = "terminal,file"
API_KEY = "x"  # the served endpoint checks no key; Hermes and the openai client insist on one
GREEDY = {"temperature": 0}  # a served model answers greedily (Hermes sends no temperature)


def hermes_config(model: str, url: str) -> dict[str, Any]:
    """The config keys that point Hermes at `model` served at `url` (…/v1)."""
    return provider_config(model, url, API_KEY, GREEDY)


def hermes_yaml(model: str, url: str) -> str:
    """`hermes_config` as YAML to paste into a config.yaml."""
    return config_yaml(hermes_config(model, url))


def write_hermes_home(files: ServedModelFiles, model: str, url: str) -> Path:
    """A HERMES_HOME holding only this model's config: Hermes run with it uses the served model."""
    return write_home(files.hermes_home, hermes_config(model, url))


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
