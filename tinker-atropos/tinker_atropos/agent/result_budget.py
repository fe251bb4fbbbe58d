"""Tool results too large for a model's context, kept out of it: each is written into the
rollout's sandbox and replaced by a preview that says where the whole of it is. Hermes'
`budget_config` (`tools.budget_config.BudgetConfig`): the same fields, defaults and order of
precedence, so `HermesAgentLoop(budget_config=...)` and `config.build_budget_config()` port as is.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

DEFAULT_RESULT_SIZE_CHARS = 100_000
DEFAULT_TURN_BUDGET_CHARS = 200_000
DEFAULT_PREVIEW_SIZE_CHARS = 1_500
# read_file is never persisted: reading a saved result back would only save it again
PINNED_THRESHOLDS: dict[str, float] = {"read_file": math.inf}
RESULTS_DIR = "~/.tool-results"  # in the rollout's home, where its shell and file tools both find it

Persist = Callable[[str, str], Awaitable[None]]  # (path in the sandbox, content)


@dataclass(frozen=True)
class BudgetConfig:
    default_result_size: int = DEFAULT_RESULT_SIZE_CHARS  # chars one result may keep inline
    turn_budget: int = DEFAULT_TURN_BUDGET_CHARS  # chars all results of one turn may keep inline
    preview_size: int = DEFAULT_PREVIEW_SIZE_CHARS  # chars of a persisted result shown inline
    tool_overrides: dict[str, int] = field(default_factory=dict)  # per-tool thresholds

    def resolve_threshold(self, tool_name: str) -> float:
        """Pinned first, then the per-tool override, then the default."""
        if tool_name in PINNED_THRESHOLDS:
            return PINNED_THRESHOLDS[tool_name]
        return self.tool_overrides.get(tool_name, self.default_result_size)


DEFAULT_BUDGET = BudgetConfig()


async def apply_budget(
    replies: list[dict[str, Any]], budget: BudgetConfig, persist: Persist, turn: int
) -> list[dict[str, Any]]:
    """One turn's tool messages with every result over its tool's threshold persisted, then the
    largest of the rest while the turn is over `turn_budget`."""
    out = [dict(r) for r in replies]
    saved: set[int] = set()
    for i, reply in enumerate(out):
        if len(reply["content"]) > budget.resolve_threshold(reply.get("name") or ""):
            await _persist(out, i, budget, persist, turn)
            saved.add(i)
    by_size = sorted(range(len(out)), key=lambda k: len(out[k]["content"]), reverse=True)
    for i in by_size:
        if sum(len(r["content"]) for r in out) <= budget.turn_budget:
            break
        if i not in saved and math.isfinite(budget.resolve_threshold(out[i].get("name") or "")):
            await _persist(out, i, budget, persist, turn)
    return out


async def _persist(out: list[dict[str, Any]], i: int, budget: BudgetConfig, persist: Persist, turn: int) -> None:
    content, name = out[i]["content"], out[i].get("name") or "tool"
    call_id = re.sub(r"[^A-Za-z0-9_.-]", "_", out[i].get("tool_call_id") or "") or f"call{i}"
    path = f"{RESULTS_DIR}/turn{turn}-{call_id}.txt"
    try:
        await persist(path, content)
        where = f"saved in full to {path}: read it with read_file (offset, limit) or the terminal"
    except Exception as exc:  # the result still has to fit: cut it, and say why
        where = f"could not be saved ({type(exc).__name__}: {exc}); the rest is cut"
    out[i]["content"] = (
        f"[{name} result of {len(content)} chars is too large for the context; {where}. "
        f"First {budget.preview_size} chars:]\n{content[: budget.preview_size]}"
    )
