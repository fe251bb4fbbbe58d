"""Hermes agent environments: a class with `HermesAgentBaseEnv` (tinker_atropos/agent, outside the
env dirs) among its ancestors; multi-turn episodes with tools, run as they are."""

from __future__ import annotations

from rl_mcp.formats.base import TOOL_CALLS_NOTE, EnvironmentFormat


class HermesFormat(EnvironmentFormat):
    name = "hermes"
    summary = "a HermesAgentBaseEnv"
    note = (
        " It is an agent environment: its episodes are multi-turn with tools (max_agent_turns, "
        "enabled_toolsets, terminal_backend)." + TOOL_CALLS_NOTE
    )
    ancestors = frozenset({"HermesAgentBaseEnv"})


FORMAT = HermesFormat()
