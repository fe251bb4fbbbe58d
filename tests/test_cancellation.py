"""A client that cancels a long call (MCP `notifications/cancelled` on stdio, the request's stream
closed on Streamable HTTP) of rl_test_inference, rl_preview_sft or rl_export_model: the server's
children of that call are gone, its scratch folder is removed, an export's folder is either complete
or absent (a previous complete export of it is untouched), and the server serves the next call.

Each transport gets one real server process (`mcp-server-rl serve`) on the local profile (tiny-chat) and runs
the three cancellations in turn on the agent environment `tool_calculator`, whose `sft` section the
preview builds, and a completed run's adapter for the export. stdio then runs rl_test_inference and
rl_export_model again to their end; HTTP, whose cancellation reaches the same handler code by another
wire (the request's POST aborted), cheap calls, one from a new client.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types.version import LATEST_MODERN_VERSION
from test_inference_run_weights import RUN_ID, _train_run
from test_inference_tool import our_processes
from test_runs_mcp import call, environ
from test_sft_runs import EDITS, SFT

from tinker_atropos.run_files import RunFiles

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = "rl_mcp.children.warm_template"  # warm templates outlive a call by design (the next one forks)
LONG_TEST = {"num_steps": 100, "group_size": 16, "timeout_s": 600}  # far longer than the test waits
LONG_PREVIEW = {"timeout_s": 600}
LONG_SFT = {**SFT, "items": 5000}  # demonstrations through the real tools: minutes of them
EXPORT = {"run_id": RUN_ID, "format": "adapter"}
SETTLE_S = 30.0  # the server's stop: SIGTERM, a grace of a few seconds, SIGKILL


def leftovers(server: psutil.Process, home: Path) -> list[str]:
    """What still runs of the server's calls: its descendants but the warm templates, and anything
    anywhere whose command line names the state dir (a descendant that left the tree)."""
    found = {}
    try:
        tree = server.children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    for proc in [*tree, *our_processes(str(home))]:
        try:
            cmd = " ".join(proc.cmdline())
            if proc.status() != psutil.STATUS_ZOMBIE and TEMPLATE not in cmd and proc.pid != server.pid:
                found[proc.pid] = f"{proc.pid}: {cmd[:160]}"
        except psutil.Error:
            continue
    return sorted(found.values())


def running(server: psutil.Process, marker: str) -> list[psutil.Process]:
    """The server's processes whose command line has `marker`."""
    found = []
    for proc in server.children(recursive=True):
        try:
            if marker in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def entries(folder: Path, keep: tuple[str, ...] = ()) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in keep) if folder.exists() else []


async def cancelled_when_running(
    client: Client, server: psutil.Process, tool: str, args: dict, marker: str, *, freeze: bool = False
) -> None:
    """Call `tool` and cancel the call (its anyio scope: the SDK sends notifications/cancelled, or
    aborts the HTTP request) once the server runs its process, whose command line has `marker`, for
    a second; or at once with that process frozen (SIGSTOP: an export of the tiny model is done in
    about a second, and a frozen child is one that ignores SIGTERM, which the stop must SIGKILL)."""
    finished: list[Any] = []

    async def calling() -> None:
        finished.append(await client.call_tool(tool, args))

    with anyio.fail_after(180):
        async with anyio.create_task_group() as tg:
            tg.start_soon(calling)
            while not (children := running(server, marker)):
                assert not finished, f"{tool} ended before it was cancelled: {finished[0].content}"
                await anyio.sleep(0.05)
            if freeze:
                for child in children:
                    child.suspend()
            else:
                await anyio.sleep(1.0)  # at work, not only started
            tg.cancel_scope.cancel()
    assert not finished


async def settled(server: psutil.Process, home: Path, left: Callable[[], list[str]]) -> None:
    """Until nothing of the cancelled call runs and `left()` (its folders) is empty; the server lives."""
    started = time.monotonic()
    while (found := leftovers(server, home) + left()) and time.monotonic() - started < SETTLE_S:
        await anyio.sleep(0.2)
    assert not found, found
    assert server.is_running()


async def configure(client: Client) -> None:
    await call(client, "rl_select_environment", name="tool_calculator")
    for field, value in {**EDITS, "sft": LONG_SFT}.items():
        await call(client, "rl_edit_config", field=field, value=value)


async def cancel_export(client: Client, server: psutil.Process, home: Path, *keep: str) -> Path:
    """An export of the run cancelled with its child frozen; nothing of it is left in the run's
    exports but what is named in `keep` (and the policy's replies the export keeps for the next)."""
    exports = RunFiles(home / "runs" / RUN_ID).exports_dir
    await cancelled_when_running(client, server, "rl_export_model", EXPORT, "tinker_atropos.export", freeze=True)
    await settled(server, home, lambda: entries(exports, keep=(".policy-replies", *keep)))
    return exports


async def cancel_each(client: Client, server: psutil.Process, home: Path) -> Path:
    """The three tools cancelled mid-call, each leaving nothing; the run's exports folder."""
    await cancelled_when_running(client, server, "rl_test_inference", LONG_TEST, "rl_mcp.children.env_process")
    await settled(server, home, lambda: entries(home / "inference_tests"))
    await cancelled_when_running(client, server, "rl_preview_sft", LONG_PREVIEW, "tinker_atropos.sft.stage")
    await settled(server, home, lambda: entries(home / "sft_previews"))
    return await cancel_export(client, server, home)


def tree_of(folder: Path) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*")}


async def test_cancelled_over_stdio(rl_home: Path, tmp_path: Path) -> None:
    _train_run(rl_home)  # a completed run with a saved adapter to export
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "rl_mcp", "serve"], env=environ(rl_home), cwd=str(ROOT)
    )
    with (tmp_path / "server.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            (server,) = [p for p in psutil.Process().children() if "rl_mcp" in p.cmdline() and "serve" in p.cmdline()]
            await configure(client)
            exports = await cancel_each(client, server, rl_home)
            # the same tools again, to their end, on the same server
            tested = await call(client, "rl_test_inference", num_steps=1, group_size=2, timeout_s=300)
            assert tested["results"][0]["status"] == "ok", tested["results"][0]["error"]
            exported = await call(client, "rl_export_model", **EXPORT)
            folder = Path(exported["folder"])
            assert folder.parent == exports and Path(exported["model_card"]) == folder / "README.md"
            assert all(Path(f["path"]).parent == folder and Path(f["path"]).is_file() for f in exported["files"])
            complete = tree_of(folder)
            # a second export of it, cancelled: the first stays as it was, nothing half-written beside it
            await cancel_export(client, server, rl_home, folder.name)
            assert tree_of(folder) == complete
            assert len(entries(rl_home / "inference_tests")) == 1  # the finished test's folder is kept
    assert (tmp_path / "server.log").read_text().count("cancelled: removed") == 4  # test, preview, 2 exports


async def test_cancelled_over_streamable_http(rl_home: Path, rl_mcp_process) -> None:
    _train_run(rl_home)
    served = rl_mcp_process("--transport", "http", "--port", "0", env=environ(rl_home))
    server = psutil.Process(served.proc.pid)
    async with Client(served.url) as client:
        # the 2026 wire: no notification from client to server, a call is cancelled by aborting its POST
        assert client.protocol_version == LATEST_MODERN_VERSION
        await configure(client)
        await cancel_each(client, server, rl_home)
        current = await call(client, "rl_get_current_config")
        assert current["environment"] == "tool_calculator"
    async with Client(served.url) as client:  # a client of its own: the server serves it as the first
        assert (await call(client, "rl_list_runs"))["runs"][0]["run_id"] == RUN_ID
