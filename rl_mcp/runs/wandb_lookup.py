"""The W&B summary of a run, when the server holds a WANDB_API_KEY: optional by contract.

Looked up only with a key, bounded in time; errors come back as data, never raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio


async def wandb_summary(
    run_name: str, project: str, environ: Mapping[str, str], *, timeout_s: float = 15.0
) -> dict[str, Any] | None:
    """URL, state and numeric summary of the W&B run logged as `project`/`run_name`.

    None when WANDB_API_KEY is unset (offline files then sit in run_dir/wandb, syncable with
    `wandb sync`). Errors and timeouts come back as {"error": ...}: never raised, never blocking.
    """
    key = environ.get("WANDB_API_KEY")
    if not key:
        return None
    try:
        with anyio.fail_after(timeout_s):
            return await anyio.to_thread.run_sync(
                _wandb_lookup, run_name, project, key, environ.get("WANDB_ENTITY"), abandon_on_cancel=True
            )
    except TimeoutError:
        return {"error": f"W&B did not answer within {timeout_s:.0f} s"}
    except Exception as exc:  # network, auth, missing run: W&B is optional by contract
        return {"error": f"W&B lookup failed: {exc}"}


def _wandb_lookup(run_name: str, project: str, key: str, entity: str | None) -> dict[str, Any]:
    import wandb  # heavy: only when a key is set

    api = wandb.Api(api_key=key, timeout=10)
    entity = entity or api.default_entity
    runs = api.runs(f"{entity}/{project}", filters={"display_name": run_name}, order="-created_at", per_page=1)
    run = next(iter(runs), None)  # the newest run of that name
    if run is None:
        return {"error": f"no W&B run named {run_name!r} in {entity}/{project}"}
    summary = {k: v for k, v in dict(run.summary).items() if isinstance(v, (int, float)) and not k.startswith("_")}
    return {"url": run.url, "state": run.state, "entity": entity, "project": project, "summary": summary}
