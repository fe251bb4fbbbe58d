"""The policy losses, one module each (its inputs, settings, math and way on Tinker: base.py says
what a module provides). A new loss is a module here and a line in BUILT_IN, or a `Loss` in another
installed package named in the entry-point group `rl_mcp.losses` (the training runtime's venv must
have it: `uv pip install --python <that venv's python> <package>`). The run config's `loss_fn` takes
their names, and both backends run every one."""

from __future__ import annotations

from tinker_atropos.losses import cispo, cross_entropy, dro, importance_sampling, ppo
from tinker_atropos.losses.base import Loss
from tinker_atropos.plugins import registry

ENTRY_POINT_GROUP = "rl_mcp.losses"
BUILT_IN: tuple[Loss, ...] = tuple(m.LOSS for m in (importance_sampling, ppo, cispo, dro, cross_entropy))
LOSSES: dict[str, Loss] = registry(BUILT_IN, ENTRY_POINT_GROUP, Loss, "loss")
NAMES = tuple(LOSSES)


def loss_named(name: str) -> Loss:
    if name not in LOSSES:
        raise ValueError(f"loss_fn {name!r} is not a loss of this product: use one of {sorted(LOSSES)}")
    return LOSSES[name]


def described() -> str:
    """`loss_fn`'s description: every loss's clause."""
    clauses = [loss.summary for loss in LOSSES.values()]
    return "Policy loss, as Tinker names them: " + ", ".join(clauses[:-1]) + " or " + clauses[-1] + "."
