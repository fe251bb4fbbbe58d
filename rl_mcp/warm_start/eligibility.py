"""Which children a template may fork, and which templates may fork them (pure).

A template has imported torch, transformers, peft and atroposlib under its own environment. What
those libraries read from the environment at import (huggingface_hub's HF_HUB_OFFLINE and cache
folders, torch's ATEN_CPU_CAPABILITY, the thread pools' OMP_/MKL_ settings, PYTHONPATH, HOME) is
read once, in the template: a child may only be forked from a template whose import-time variables
equal its own. Every other variable (the run's TMPDIR, keys, RL_MCP_* settings, W&B's, a test
runner's) is the child's own, set after the fork.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tinker_atropos.warm_fork import import_key


@dataclass(frozen=True)
class TemplateKey:
    """The interpreter and the import-time environment a template serves, and what was installed
    where it imports from when it started (`packages`: a package installed or removed since, such as
    a loss registered by another package's entry point, needs a new template)."""

    python: str
    env: tuple[tuple[str, str], ...]
    packages: tuple[int, ...] = ()

    def environment(self) -> dict[str, str]:
        return dict(self.env)


def template_key(
    argv: Sequence[str], env: Mapping[str, str], product_python: str, platform: str = sys.platform
) -> TemplateKey | None:
    """The template that may fork `argv` under `env`, or None when it must start cold: another
    interpreter (a verifiers or layered venv), interpreter flags, warm starts turned off, or not
    Linux (`tinker_atropos.warm_fork.import_key`)."""
    shared = import_key(argv, env, product_python, platform)
    return None if shared is None else TemplateKey(argv[0], shared)
