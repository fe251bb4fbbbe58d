"""The server as a real process: stdio, Streamable HTTP and SSE clients, auth, DNS rebinding, Inspector."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[1]
TOKEN = "test-token-4f1c"
OWN_TOOLS = {"rl_list_environments", "rl_select_environment", "rl_get_current_config", "rl_edit_config"}
HEAVY_MODULES = ("torch", "transformers", "atroposlib", "matplotlib")
INSPECTOR = ROOT / ".ci" / "mcp-inspector"  # runs the Inspector on the Node 22 that `make inspector` installs
INSPECTOR_INSTALLED = (ROOT / ".ci" / "node" / "node_modules" / ".bin" / "mcp-inspector").exists()

# Runs the real server entry point and records which modules it imported once it exits.
MODULES_PROBE = textwrap.dedent(
    """
    import atexit, sys
    from pathlib import Path
    out = Path(sys.argv[1])
    atexit.register(lambda: out.write_text("\\n".join(sorted(sys.modules))))
    from rl_mcp.cli import main
    sys.exit(main(["serve", "--transport", "stdio"]))
    """
)


async def test_stdio_server_answers_and_imports_nothing_heavy(probe_envs, tmp_path: Path):
    modules_file = tmp_path / "modules.txt"
    params = StdioServerParameters(
        command=sys.executable,
        args=["-c", MODULES_PROBE, str(modules_file)],
        env=dict(os.environ),
        cwd=str(ROOT),
    )
    with (tmp_path / "stderr.log").open("w") as errlog:
        from mcp.client.stdio import stdio_client

        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            assert OWN_TOOLS <= {t.name for t in (await client.list_tools()).tools}
            listing = await client.call_tool("rl_list_environments", {})
            assert "probe" in {e["name"] for e in listing.structured_content["environments"]}
            # Selecting introspects the environment: atroposlib is imported, but in a child process.
            selected = await client.call_tool("rl_select_environment", {"name": "probe"})
            assert not selected.is_error, selected.content
            edited = await client.call_tool("rl_edit_config", {"field": "difficulty", "value": 99})
            assert edited.is_error and "<= 10" in edited.content[0].text
    deadline = time.monotonic() + 20
    while not modules_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    modules = set(modules_file.read_text().split())
    assert "rl_mcp.mcp_api.server" in modules
    imported = [m for m in modules if m.split(".")[0] in HEAVY_MODULES]
    assert imported == [], f"the server process imported {imported}"
    assert "profile smollm2" in (tmp_path / "stderr.log").read_text()  # logs went to stderr


async def test_stdio_keeps_stdout_for_protocol_only(tmp_path: Path):
    """Everything the server writes to stdout must be JSON-RPC: logs go to stderr."""
    request = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    proc = subprocess.run(
        [sys.executable, "-m", "rl_mcp", "serve", "--log-level", "DEBUG"],
        input=json.dumps(request) + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, proc.stderr
    for line in lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert json.loads(lines[0])["result"]["serverInfo"]["name"] == "rl-mcp"
    assert "profile smollm2" in proc.stderr  # the start-up log line went to stderr


async def test_log_file_option(tmp_path: Path):
    log_file = tmp_path / "server.log"
    proc = subprocess.run(
        [sys.executable, "-m", "rl_mcp", "serve", "--log-file", str(log_file)],
        input="",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "profile smollm2" in log_file.read_text()
    assert proc.stdout == ""


def _auth_client(token: str | None) -> httpx2.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx2.AsyncClient(headers=headers, timeout=30)


async def test_streamable_http_requires_the_token(rl_mcp_process):
    served = rl_mcp_process("--transport", "http", "--port", "0", "--auth-token", TOKEN)
    assert served.url.endswith("/mcp")
    init = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx2.AsyncClient(timeout=30) as raw:
        for auth in (None, "Bearer wrong-token", f"Basic {TOKEN}"):
            h = {**headers, **({"Authorization": auth} if auth else {})}
            response = await raw.post(served.url, json=init, headers=h)
            assert response.status_code == 401, (auth, response.status_code)
        # DNS rebinding: the right token from a page whose Host is not ours is refused.
        response = await raw.post(
            served.url, json=init, headers={**headers, "Authorization": f"Bearer {TOKEN}", "Host": "evil.example:80"}
        )
        assert response.status_code == 421
    for mode in ("auto", "legacy"):
        async with _auth_client(TOKEN) as http:
            async with Client(streamable_http_client(served.url, http_client=http), mode=mode) as client:
                assert OWN_TOOLS <= {t.name for t in (await client.list_tools()).tools}
                result = await client.call_tool("rl_list_environments", {})
                assert not result.is_error and result.structured_content["environments"]


async def test_streamable_http_without_token_on_loopback(rl_mcp_process):
    served = rl_mcp_process("--transport", "http", "--port", "0")
    async with Client(served.url, mode="legacy") as client:
        assert OWN_TOOLS <= {t.name for t in (await client.list_tools()).tools}


async def test_sse_requires_the_token(rl_mcp_process):
    served = rl_mcp_process("--transport", "sse", "--port", "0", "--auth-token", TOKEN)
    assert served.url.endswith("/sse")
    async with httpx2.AsyncClient(timeout=30) as raw:
        assert (await raw.get(served.url)).status_code == 401
        messages = served.url.replace("/sse", "/messages/?session_id=00000000000000000000000000000000")
        assert (await raw.post(messages, json={})).status_code == 401
    async with Client(sse_client(served.url, headers={"Authorization": f"Bearer {TOKEN}"}), mode="legacy") as client:
        result = await client.call_tool("rl_list_environments", {})
        assert not result.is_error and result.structured_content["environments"]


def test_binding_beyond_loopback_needs_a_token():
    proc = subprocess.run(
        [sys.executable, "-m", "rl_mcp", "serve", "--transport", "http", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--auth-token" in proc.stderr and "RL_MCP_AUTH_TOKEN" in proc.stderr


def test_unknown_profile_is_refused_with_the_choices():
    proc = subprocess.run(
        [sys.executable, "-m", "rl_mcp", "serve", "--profile", "nope"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "unknown profile 'nope'" in proc.stderr and "'local'" in proc.stderr


def test_help_marks_sse_deprecated_and_names_streamable_http():
    """MCP 2026-07-28 deprecates HTTP+SSE: the help says so and points at Streamable HTTP."""
    proc = subprocess.run(
        [sys.executable, "-m", "rl_mcp", "serve", "--help"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "sse (HTTP+SSE on /sse: deprecated by MCP 2026-07-28" in text and "use http" in text


def test_doctor_reports_without_leaking_keys(probe_envs):
    env = {**os.environ, "TINKER_API_KEY": "tml-doctor-sentinel", "WANDB_API_KEY": "wandb-doctor-sentinel"}
    proc = subprocess.run(
        [sys.executable, "-m", "rl_mcp", "doctor"], capture_output=True, text=True, cwd=ROOT, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "sentinel" not in out + proc.stderr
    assert "TINKER_API_KEY       set" in out and "OPENROUTER_API_KEY   not set" in out
    assert "profile       tinker" in out  # TINKER_API_KEY selects the tinker profile
    assert "runs train Qwen/Qwen3-8B: TINKER_API_KEY is set" in out
    assert "probe" in out and "atroposlib" in out and "torch" in out


@pytest.mark.skipif(
    not INSPECTOR_INSTALLED and not os.environ.get("CI"), reason="MCP Inspector not installed: run `make inspector`"
)
def test_mcp_inspector_cli_lists_and_calls_tools(probe_envs):
    # Inspector 2.x hands the server no environment of its own: the state dir travels by -e
    home = os.environ["RL_MCP_HOME"]
    base = [str(INSPECTOR), "--cli", "-e", f"RL_MCP_HOME={home}", sys.executable, "-m", "rl_mcp", "serve"]
    # --strict: exit 6 on any error-severity schema portability problem
    listed = subprocess.run(
        [*base, "--method", "tools/list", "--strict"], capture_output=True, text=True, cwd=ROOT, timeout=180
    )
    assert listed.returncode == 0, listed.stderr
    tools = {t["name"]: t for t in json.loads(listed.stdout)["tools"]}
    assert OWN_TOOLS <= set(tools)
    for name in OWN_TOOLS:
        assert tools[name]["inputSchema"]["type"] == "object" and tools[name]["outputSchema"]["type"] == "object"
        assert set(tools[name]["annotations"]) >= {"readOnlyHint", "destructiveHint", "idempotentHint"}
    called = subprocess.run(
        [*base, "--method", "tools/call", "--tool-name", "rl_select_environment", "--tool-arg", "name=../etc"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
    )
    answer = json.loads(called.stdout)
    assert answer["isError"] is True and "pattern" in answer["content"][0]["text"]
    assert (Path(home) / "runs.sqlite").is_file()  # the server used the test's state dir, not ~/.rl-mcp


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_sigterm_shuts_down_cleanly(tmp_path: Path, transport):
    """SIGTERM closes the app (where --stop-runs-on-exit stops runs) and exits, stdin still open."""
    import signal

    log = tmp_path / "serve.log"
    args = [sys.executable, "-m", "rl_mcp", "serve", "--transport", transport, "--port", "0", "--log-file", str(log)]
    proc = subprocess.Popen(args, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    try:
        ready = f"serving {transport}"
        deadline = time.monotonic() + 60
        while ready not in (log.read_text() if log.exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text() if log.exists() else ""
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert "received SIGTERM: shutting down" in log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_taken_port_is_one_clear_line(tmp_path: Path):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "rl_mcp", "serve", "--transport", "http", "--port", str(port)],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
            env={**os.environ, "RL_MCP_HOME": str(tmp_path)},
        )  # fmt: skip
    assert proc.returncode == 1
    assert f"rl-mcp: cannot serve on 127.0.0.1:{port}:" in proc.stderr and "in use" in proc.stderr
    assert "Traceback" not in proc.stderr and "ExceptionGroup" not in proc.stderr
