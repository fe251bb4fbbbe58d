"""Atropos environments: a class with atroposlib's `BaseEnv` among its ancestors (followed by name
through every scanned file), run as it is; its fields are its config class's."""

from __future__ import annotations

from rl_mcp.formats.base import EnvironmentFormat


class AtroposFormat(EnvironmentFormat):
    name = "atropos"
    summary = "a BaseEnv"
    ancestors = frozenset({"BaseEnv"})


FORMAT = AtroposFormat()
