"""The rl_compare_runs answer, built from the domain's comparison (the tool's and `mcp-server-rl compare --json`'s)."""

from __future__ import annotations

from rl_mcp.mcp_api.compare import descriptions
from rl_mcp.mcp_api.compare.answers import ComparedRun, CompareResult, ConfigDifference
from rl_mcp.runs.compare import Comparison


def compare_answer(comparison: Comparison) -> CompareResult:
    """The domain's comparison as the tool's answer (the same field names, read by attribute)."""
    return CompareResult(
        runs=[ComparedRun.model_validate(r, from_attributes=True) for r in comparison.runs],
        config_differences=[
            ConfigDifference.model_validate(d, from_attributes=True) for d in comparison.config_differences
        ],
        best_by_eval=comparison.best_by_eval,
        best_by_reward_per_minute=comparison.best_by_reward_per_minute,
        notes=comparison.notes,
        next_step=descriptions.next_after_compare(comparison.best_by_eval, comparison.best_by_reward_per_minute),
    )
