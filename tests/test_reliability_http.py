"""200 concurrent tool calls over Streamable HTTP to a real `mcp-server-rl serve --transport http`.

Ten clients (both protocol generations, bearer token on) each fire twenty calls at once. Every
call carries something unique (an unknown run id or environment name), so an answer routed to
the wrong request, lost, or mixed up fails its own check.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TOKEN = "reliability-token-5c1d"
CLIENTS = 10
CALLS_PER_CLIENT = 20
BUNDLED = {"letter_repeat", "gsm8k_tinker"}

Check = Callable[[Any], None]


def error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    return "\n".join(c.text for c in result.content if c.type == "text")


def planned_call(client_no: int, call_no: int) -> tuple[str, dict[str, Any], Check]:
    """The call number `call_no` of client `client_no`, and how to check its answer."""
    tag = f"c{client_no}-n{call_no}"
    kind = call_no % 5
    if kind == 0:

        def listed(result: Any) -> None:
            names = {e["name"] for e in result.structured_content["environments"]}
            assert BUNDLED <= names

        return "rl_list_environments", {}, listed
    if kind == 1:

        def no_runs(result: Any) -> None:
            assert result.structured_content["runs"] == []

        return "rl_list_runs", {}, no_runs
    if kind == 2:
        run_id = f"nope-{tag}"

        def unknown_run(result: Any) -> None:
            assert run_id in error_text(result)

        return "rl_check_status", {"run_id": run_id}, unknown_run
    if kind == 3:
        name = f"missing_{tag}"

        def unknown_env(result: Any) -> None:
            text = error_text(result)
            assert name in text and "letter_repeat" in text  # names the bad one, lists the real ones

        return "rl_select_environment", {"name": name}, unknown_env

    def nothing_selected(result: Any) -> None:
        assert "no environment is selected" in error_text(result)

    return "rl_get_current_config", {}, nothing_selected


@pytest.mark.anyio
async def test_200_concurrent_calls_over_streamable_http(rl_mcp_process) -> None:
    served = rl_mcp_process(
        "--transport", "http", "--port", "0", "--profile", "local", env={"RL_MCP_AUTH_TOKEN": TOKEN}
    )
    answered: list[str] = []
    failures: list[str] = []

    async def one(client: Client, client_no: int, call_no: int) -> None:
        tool, args, check = planned_call(client_no, call_no)
        try:
            check(await client.call_tool(tool, args))
            answered.append(f"{client_no}/{call_no}")
        except Exception as exc:
            failures.append(f"{tool}({args}): {type(exc).__name__}: {exc}")

    async def session(client_no: int, ready: Callable[[], Awaitable[None]], go: anyio.Event) -> None:
        mode = "legacy" if client_no % 2 else "auto"
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120)
        async with http, Client(streamable_http_client(served.url, http_client=http), mode=mode) as client:
            await ready()
            await go.wait()  # every client connected: now all 200 calls go out together
            async with anyio.create_task_group() as tg:
                for call_no in range(CALLS_PER_CLIENT):
                    tg.start_soon(one, client, client_no, call_no)

    go = anyio.Event()
    connected = 0

    async def ready() -> None:
        nonlocal connected
        connected += 1
        if connected == CLIENTS:
            go.set()

    with anyio.fail_after(240):
        async with anyio.create_task_group() as tg:
            for client_no in range(CLIENTS):
                tg.start_soon(session, client_no, ready, go)

    assert not failures, "\n".join(failures[:10])
    assert len(answered) == CLIENTS * CALLS_PER_CLIENT
    assert served.proc.poll() is None, "the server is still serving"

    # The server still answers afterwards, and refuses a call without the token.
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)
    async with http, Client(streamable_http_client(served.url, http_client=http)) as client:
        planned_call(0, 0)[2](await client.call_tool("rl_list_environments", {}))
    async with httpx2.AsyncClient(timeout=30) as raw:
        response = await raw.post(served.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 401
