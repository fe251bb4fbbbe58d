"""The policy losses, one module each (its inputs, settings, math and way on Tinker: base.py says
what a module provides). A new loss is a module here and a line in BUILT_IN, or a `Loss` in another
installed package named in the entry-point group `rl_mcp.losses` (the training runtime's venv must
have it: `uv pip install --python <that venv's python> <package>`). The run config's `loss_fn` takes
their names, and both backends run every one."""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

from tinker_atropos.losses import cispo, cross_entropy, dro, importance_sampling, ppo
from tinker_atropos.losses.base import Loss

ENTRY_POINT_GROUP = "rl_mcp.losses"
BUILT_IN: tuple[Loss, ...] = tuple(m.LOSS for m in (importance_sampling, ppo, cispo, dro, cross_entropy))
logger = logging.getLogger(__name__)


def _installed() -> list[Loss]:
    """The losses other packages register; one that cannot be loaded, or is no `Loss`, is left out with
    the reason in the log, never failing the process that asked."""
    found = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
        except Exception as exc:  # a plugin's import may fail any way
            logger.warning("loss %s (%s) left out: it cannot be loaded: %s", point.name, point.value, exc)
            continue
        loss = loaded() if isinstance(loaded, type) and issubclass(loaded, Loss) else loaded
        if not isinstance(loss, Loss):
            logger.warning("loss %s (%s) left out: it is no tinker_atropos.losses.base.Loss", point.name, point.value)
        else:
            found.append(loss)
    return found


def _registry() -> dict[str, Loss]:
    losses = {loss.name: loss for loss in BUILT_IN}
    for loss in _installed():
        if loss.name in losses:
            logger.warning("loss %s from an entry point left out: the name is taken", loss.name)
        else:
            losses[loss.name] = loss
    return losses


LOSSES: dict[str, Loss] = _registry()
NAMES = tuple(LOSSES)


def loss_named(name: str) -> Loss:
    if name not in LOSSES:
        raise ValueError(f"loss_fn {name!r} is not a loss of this product: use one of {sorted(LOSSES)}")
    return LOSSES[name]


def described() -> str:
    """`loss_fn`'s description: every loss's clause."""
    clauses = [loss.summary for loss in LOSSES.values()]
    return "Policy loss, as Tinker names them: " + ", ".join(clauses[:-1]) + " or " + clauses[-1] + "."
