"""Before an export that is to be pushed: whether the Hub will take it (a token, not offline, the
endpoint answering and accepting the token), checked in seconds, so that a push that cannot happen
fails before the minutes a conversion takes rather than after them. The token is never echoed."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from rl_mcp.export.plan import ExportError
from tinker_atropos.export.hub import hub_refusal
from tinker_atropos.http_tls import shared_tls

HUB_CHECK_TIMEOUT_S = 10.0
DEFAULT_ENDPOINT = "https://huggingface.co"


async def check_hub(repo: str, environ: Mapping[str, str]) -> None:
    """ExportError naming the cause and the fix when `repo` cannot be pushed to from here."""
    if refusal := hub_refusal(environ):
        raise ExportError(f"{refusal}. Nothing was exported for {repo}")
    endpoint = (environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    token = environ["HF_TOKEN"].strip()
    try:
        async with httpx.AsyncClient(timeout=HUB_CHECK_TIMEOUT_S, verify=shared_tls()) as client:
            resp = await client.get(f"{endpoint}/api/whoami-v2", headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise ExportError(
            f"the Hub at {endpoint} could not be reached to push {repo} ({type(exc).__name__}); nothing was "
            "exported: check the network (or HF_ENDPOINT), then retry"
        ) from None
    if resp.status_code in (401, 403):
        raise ExportError(
            f"the Hub at {endpoint} refused HF_TOKEN (HTTP {resp.status_code}) to push {repo}; nothing was "
            "exported: set a write token from huggingface.co/settings/tokens, then retry"
        )
