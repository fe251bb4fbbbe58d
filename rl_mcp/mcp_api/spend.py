"""Before a run that spends money: an elicitation that shows the cost figures and asks to confirm.

`SpendConfirmation` is a tool parameter filled by the SDK's resolver machinery (not by the
agent): on a paid profile, where the client declared form elicitation, it asks the user (the
2025 generation as a standalone `elicitation/create`, the 2026 one through `input_required`).
Where the client cannot be asked, or nothing is paid, nothing is asked and the tool goes on;
the figures are then in its answer.

The resolver is module-level (the SDK evaluates the tool's annotations in this module's
globals), so it finds its app's estimator through the server it is called for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Literal
from weakref import WeakKeyDictionary

from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from pydantic import BaseModel, Field

from rl_mcp.app import AppContext
from rl_mcp.errors import UserError
from rl_mcp.runs.cost import CostFigures, estimate
from rl_mcp.runs.preflight import preflight
from rl_mcp.session.run_config import render_run_config

# () -> the figures and the environment's name, or None when there is nothing to confirm.
Estimator = Callable[[], Awaitable[tuple[CostFigures, str] | None]]
_estimators: WeakKeyDictionary[MCPServer, Estimator] = WeakKeyDictionary()


class NotConfirmed(UserError):
    """The user declined (or cancelled) the cost confirmation: nothing was started."""


class ConfirmSpend(BaseModel):
    # A default, so that a client that accepts with no content (Hermes' approval prompt) confirms.
    confirm: bool = Field(default=True, description="Start the run and spend the budget shown")


def register_spend_gate(server: MCPServer, app: AppContext) -> None:
    """Bind `server`'s confirmations to `app`: its profile, selection and config."""
    _estimators[server] = lambda: figures_for(app)


async def figures_for(app: AppContext) -> tuple[CostFigures, str] | None:
    """The figures of a run started now, or None: nothing paid, or a start that would fail anyway
    (no selection, no key, an environment that cannot train yet: rl_start_training then says so
    without asking)."""
    settings, profile = app.settings, app.settings.profile
    if not profile.spends_money:
        return None
    try:
        info, schema = await app.runnable_schema()
        preflight(settings, info.name, info.file)
    except UserError:
        return None
    config = render_run_config(
        profile=profile, schema=schema, state=app.session.state, api_port=0, inference_port=0, run_dir=settings.home
    )
    return estimate(profile, config), info.name


def can_elicit(ctx: Context) -> bool:
    """The client declared form elicitation (a bare `elicitation: {}` counts, as in the SDK)."""
    caps = ctx.client_capabilities
    elicitation = caps.elicitation if caps is not None else None
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


async def confirm_spend(ctx: Context) -> Elicit[ConfirmSpend] | None:
    estimator = _estimators.get(ctx.mcp_server)
    found = await estimator() if estimator is not None else None
    if found is None or not can_elicit(ctx):
        return None
    figures, environment = found
    return Elicit(figures.message(environment), ConfirmSpend)


SpendConfirmation = Annotated[ElicitationResult[ConfirmSpend], Resolve(confirm_spend)]


def confirmed_by(outcome: ElicitationResult[ConfirmSpend]) -> Literal["elicitation", "not_asked"]:
    """`elicitation` when the user confirmed, `not_asked` when nothing was asked; else NotConfirmed."""
    if isinstance(outcome, AcceptedElicitation):
        if outcome.data is None:
            return "not_asked"
        if isinstance(outcome.data, ConfirmSpend) and outcome.data.confirm:
            return "elicitation"
    raise NotConfirmed(
        "training not started: the cost confirmation was declined. Nothing was started and nothing "
        "was spent; reduce total_steps / batch_size with rl_edit_config if the budget was the problem."
    )
