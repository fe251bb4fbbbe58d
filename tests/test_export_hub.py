"""The Hub checked before an export that is to be pushed: each refusal named with its fix and the
token never echoed, against a real HTTP server on loopback standing in for the Hub's whoami."""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from loopback_http import loopback_http

from rl_mcp.export.hub_check import check_hub
from rl_mcp.export.plan import ExportError

pytestmark = pytest.mark.anyio
SECRET = "hf_rlmcpsecret1111111111111111"


class _Whoami(BaseHTTPRequestHandler):
    """200 for SECRET's bearer on /api/whoami-v2, 401 for any other token."""

    def do_GET(self) -> None:
        ok = self.path == "/api/whoami-v2" and self.headers.get("Authorization") == f"Bearer {SECRET}"
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(b'{"name": "me"}' if ok else b'{"error": "Invalid credentials"}')

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hub() -> Iterator[str]:
    with loopback_http(_Whoami) as url:
        yield url


async def test_a_token_the_hub_accepts_passes(hub: str) -> None:
    await check_hub("me/model", {"HF_TOKEN": SECRET, "HF_ENDPOINT": hub})


@pytest.mark.parametrize(
    ("environ", "needed"),
    [
        ({}, "needs HF_TOKEN"),
        ({"HF_TOKEN": SECRET, "HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
        ({"HF_TOKEN": "hf_wrongwrongwrong"}, "refused HF_TOKEN (HTTP 401)"),
    ],
)
async def test_a_push_that_cannot_happen_is_refused_naming_why(hub: str, environ: dict[str, str], needed: str) -> None:
    with pytest.raises(ExportError) as refused:
        await check_hub("me/model", {"HF_ENDPOINT": hub, **environ})
    message = str(refused.value)
    assert needed in message and "me/model" in message and "othing was exported" in message, message
    assert SECRET not in message and "hf_wrongwrongwrong" not in message
