"""The live run view (an MCP App) in a real browser.

Debian's headless Chromium, driven by Playwright for Python, loads tests/app_host/host.html: a minimal
MCP Apps host that iframes the ui:// page read from a live `mcp-server-rl serve` (Streamable HTTP), speaks the
postMessage protocol with it, and relays its tools/call and resources/read to that server through the
test's MCP client. A real local run trains meanwhile; the curves must grow and the stop button must stop
it. The screenshot it takes is the one the README shows
(written to docs/images/ with RL_MCP_UPDATE_SCREENSHOTS=1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import CallToolResult, ReadResourceResult
from playwright.async_api import Browser, Frame, Page, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeout

from rl_mcp.mcp_api.run_view import RUN_VIEW_URI
from rl_mcp.runs.vocab import ACTIVE_STATUSES

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[1]
HOST_PAGE = Path(__file__).parent / "app_host" / "host.html"
SCREENSHOT = ROOT / "docs" / "images" / "run-view.png"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
RUN = {"total_steps": 150, "group_size": 4, "batch_size": 8}


def wire(result: CallToolResult | ReadResourceResult) -> dict[str, Any]:
    """A result as it travels in JSON-RPC (camelCase), which is what a host hands its view."""
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def call(client: Client, tool: str, **args: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    return result.structured_content or {}


async def points(view: Frame, chart: str) -> int:
    return int(await view.get_attribute(f"#chart-{chart}", "data-points") or 0)


async def grows(view: Frame, chart: str, beyond: int, timeout_s: float) -> int:
    """Waits until the chart plots more than `beyond` points; returns how many it plots."""
    try:
        await view.wait_for_function(
            "([id, n]) => Number(document.getElementById(id).dataset.points) > n",
            arg=[f"chart-{chart}", beyond],
            timeout=timeout_s * 1000,
        )
    except PlaywrightTimeout as exc:
        shown = {key: await view.text_content(f"#{key}") for key in ("status", "message", "facts")}
        raise AssertionError(
            f"the {chart} curve stayed at {beyond} points for {timeout_s} s; the view: {shown}"
        ) from exc
    return await points(view, chart)


async def test_served_view_is_self_contained_and_bound(mcp_app: Callable[..., Any]) -> None:
    """The ui:// page ships its own script and styles (no URL to fetch); the tools whose results it renders
    name it, and the server advertises the MCP Apps extension."""
    async with mcp_app() as (_, server), Client(server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        content = (await client.read_resource(RUN_VIEW_URI)).contents[0]
        extensions = client.server_capabilities.extensions or {}
    assert "io.modelcontextprotocol/ui" in extensions
    for bound in ("rl_start_training", "rl_check_status", "rl_compare_runs"):
        assert tools[bound].meta == {"ui": {"resourceUri": RUN_VIEW_URI}}, bound
    assert tools["rl_stop_training"].meta is None  # only tools whose results the view renders are bound
    assert content.mime_type == "text/html;profile=mcp-app"
    html = content.text  # type: ignore[union-attr]
    assert html.startswith("<!doctype html>") and "ui/initialize" in html and "svg" in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "the page must fetch nothing"
    assert "/* run_view.js */" not in html and "/* run_view.css */" not in html
    assert len(html) < 40_000


async def test_live_view_follows_a_run_and_stops_it(rl_mcp_process: Callable[..., Any], tmp_path: Path) -> None:
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"chromium is not installed at {CHROMIUM}: `make browser` installs Debian's package")
    served = rl_mcp_process(
        "--transport", "http", "--port", "0", "--stop-runs-on-exit",
        env={"RL_MCP_PROFILE": "local", "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    async with Client(served.url) as client, async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM)
        html = (await client.read_resource(RUN_VIEW_URI)).contents[0].text  # type: ignore[union-attr]
        await call(client, "rl_select_environment", name="letter_repeat")
        for field, value in RUN.items():
            await call(client, "rl_edit_config", field=field, value=value)
        started = await client.call_tool("rl_start_training", {})  # the view opens on the start's answer
        assert not started.is_error, started.content
        runs = [(started.structured_content or {})["run_id"]]
        try:
            async with host_page(browser, client) as page:
                await follow_and_stop(page, html, runs[0], wire(started), tmp_path)
            assert (await call(client, "rl_check_status", run_id=runs[0]))["status"] == "stopped"

            # a second, short run, then both side by side (rl_compare_runs renders in the same view)
            await call(client, "rl_edit_config", field="total_steps", value=4)
            runs.append((await call(client, "rl_start_training", wait=True))["run_id"])
            await ended(client, runs[1], timeout_s=120)
            compared = await client.call_tool("rl_compare_runs", {"run_ids": runs})
            assert not compared.is_error, compared.content
            async with host_page(browser, client) as page:
                await compare(page, client, html, runs, wire(compared))
        finally:
            for run_id in runs:  # idempotent: nothing is left running whatever failed
                await client.call_tool("rl_stop_training", {"run_id": run_id})
            await browser.close()


async def ended(client: Client, run_id: str, timeout_s: float) -> None:
    """Waits for the run's end through its status resource (rl_check_status is rate-limited)."""
    with anyio.fail_after(timeout_s):
        while json.loads(await resource_text(client, f"rl://runs/{run_id}"))["status"] in ACTIVE_STATUSES:
            await anyio.sleep(1)


async def resource_text(client: Client, uri: str) -> str:
    return (await client.read_resource(uri)).contents[0].text  # type: ignore[union-attr]


@asynccontextmanager
async def host_page(browser: Browser, client: Client) -> AsyncIterator[Page]:
    """The test host in a fresh page, its relay bound to `client`; on leaving, the page must have made
    no network request and raised no error (a CSP violation included)."""
    requests: list[str] = []
    problems: list[str] = []

    async def relay(method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "tools/call":
            return wire(await client.call_tool(params["name"], params.get("arguments") or {}))
        return wire(await client.read_resource(params["uri"]))

    page = await browser.new_page(viewport={"width": 900, "height": 560})
    page.on("request", lambda r: requests.append(r.url))
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    await page.expose_function("mcpRelay", relay)
    await page.set_content(HOST_PAGE.read_text())
    try:
        yield page
    finally:
        await page.close()
    assert not [u for u in requests if not u.startswith(("about:", "data:"))], requests  # no network at all
    assert not problems, json.dumps(problems, indent=1)


async def load_view(page: Page, html: str, tool: str, args: dict[str, Any], result: dict[str, Any]) -> Frame:
    await page.evaluate(
        "([html, tool, args, result]) => window.loadView(html, tool, args, result)", [html, tool, args, result]
    )
    frame = await (await page.query_selector("#frame")).content_frame()  # type: ignore[union-attr]
    assert frame is not None
    return frame


async def follow_and_stop(page: Page, html: str, run_id: str, first: dict[str, Any], tmp_path: Path) -> None:
    frame = await load_view(page, html, "rl_start_training", {}, first)
    await frame.wait_for_function("id => document.getElementById('title').textContent.startsWith(id)", arg=run_id)

    # the curves update while the run trains: the reward curve gains points between two reads
    seen = await grows(frame, "reward", 0, timeout_s=240)
    assert await grows(frame, "reward", seen, timeout_s=120) > seen
    assert await points(frame, "loss") > 0
    await grows(frame, "reward", 2, timeout_s=120)
    step = await frame.text_content("#facts")
    assert step and re.search(rf"Step\d+ / {RUN['total_steps']}", step), step
    # the README's picture is refreshed on request only, so a test run leaves the tree as it was
    shot = SCREENSHOT if os.environ.get("RL_MCP_UPDATE_SCREENSHOTS") == "1" else tmp_path / SCREENSHOT.name
    await page.locator("#frame").screenshot(path=str(shot))
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 5_000

    # the stop button (two clicks: arm, confirm) stops the run through the host
    await frame.click("#stop")
    assert (await frame.text_content("#stop")) == "Confirm stop"
    await frame.click("#stop")
    await frame.wait_for_function("() => document.getElementById('view').dataset.status === 'stopped'", timeout=90_000)
    assert "stopped" in (await frame.text_content("#message") or "")

    log = await page.evaluate("window.hostLog")
    methods = [m.get("method") for m in log]
    assert methods[:2] == ["ui/initialize", "ui/notifications/initialized"], methods[:4]
    stops = [m for m in log if m.get("method") == "tools/call"]
    assert [m["params"] for m in stops] == [{"name": "rl_stop_training", "arguments": {"run_id": run_id}}]
    reads = {m["params"]["uri"] for m in log if m.get("method") == "resources/read"}
    assert reads == {f"rl://runs/{run_id}", f"rl://runs/{run_id}/metrics"}


async def compare(page: Page, client: Client, html: str, runs: list[str], result: dict[str, Any]) -> None:
    """Both runs' curves in one chart each, one colour per run, every step of each run plotted."""
    frame = await load_view(page, html, "rl_compare_runs", {"run_ids": runs}, result)
    await frame.wait_for_function("() => document.querySelectorAll('#legend span').length === 2")
    assert (await frame.text_content("#title")) == "Comparing 2 runs"
    assert [await frame.text_content(f"#legend span:nth-child({i})") for i in (1, 2)] == runs
    steps = 0
    for run_id in runs:
        history = json.loads(await resource_text(client, f"rl://runs/{run_id}/metrics"))["history"]
        steps += sum(1 for row in history if row.get("reward_mean") is not None)
    assert await points(frame, "reward") == steps
    assert len(await frame.query_selector_all("#chart-reward polyline")) == 2
