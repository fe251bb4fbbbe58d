"""A sandboxed stdio MCP server starts wherever it is installed: its venv under the host's /tmp,
which bubblewrap's private /tmp hides, is bound again above it, and nothing else of /tmp is."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tinker_atropos.agent.sandboxes.bwrap import probe
from tinker_atropos.agent.sandboxes.bwrap_mounts import Mounts, program_paths
from tinker_atropos.mcp_tools.servers_file import ServerSpec
from tinker_atropos.mcp_tools.sessions import call_tool, list_tools, open_session

pytestmark = pytest.mark.anyio

READER = """\
from mcp.server.mcpserver import MCPServer

server = MCPServer("reader")


@server.tool()
def read(path: str) -> str:
    \"\"\"A file's text, or why it cannot be read.\"\"\"
    try:
        with open(path) as f:
            return f.read()
    except OSError as exc:
        return f"unreadable: {type(exc).__name__}"


server.run()
"""


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder under the host's /tmp itself, wherever the test's own temporary folders are."""
    path = Path(tempfile.mkdtemp(prefix="rl-mcp-bwrap-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def scratch_venv(root: Path) -> Path:
    """A venv under /tmp layered (a .pth) on this interpreter's packages, as a user's scratch venv
    or an environment package's venv is, with a server script whose `#!` names its interpreter."""
    venv = root / "venv"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True)  # type: ignore[attr-defined]
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    script = venv / "bin" / "reader-server"
    script.write_text(f"#!{venv / 'bin' / 'python'}\n{READER}")
    script.chmod(0o755)
    return script


async def test_a_server_installed_under_tmp_runs_in_bubblewrap_and_sees_nothing_else_there(scratch: Path) -> None:
    if (why := probe()) is not None:
        pytest.skip(f"bubblewrap does not run here: {why}")
    script = scratch_venv(scratch)
    beside = scratch / "beside.txt"
    beside.write_text("host secret")
    spec = ServerSpec(name="reader", command=str(script))
    async with open_session(spec, start_timeout_s=60, sandbox="bwrap") as session:
        assert [t.name for t in await list_tools(session)] == ["read"]
        own = await call_tool(session, "read", {"path": str(script)}, timeout_s=30, max_chars=10_000)
        other = await call_tool(session, "read", {"path": str(beside)}, timeout_s=30, max_chars=1000)
    assert not own.error and "MCPServer" in own.text
    assert other.text == "unreadable: FileNotFoundError"


def test_only_what_the_program_needs_is_bound_above_the_private_tmp(scratch: Path) -> None:
    script = scratch_venv(scratch)
    mounts = Mounts()
    mounts.host_read_only(["/"])
    mounts.devices()
    mounts.private_tmp()
    mounts.read_only(program_paths(str(script), ["--flag", str(scratch / "missing.py")]))
    bound = {mounts.args[i + 1] for i, a in enumerate(mounts.args) if a == "--ro-bind"} - {"/"}
    parent = sysconfig.get_paths()["purelib"]  # the .pth's folder: bound only where it is under /tmp too
    expected = {str(scratch / "venv"), *([parent] if parent.startswith("/tmp/") else [])}
    assert bound == expected  # the script and interpreter are inside the venv; its base is outside /tmp
    assert mounts.shows(script) and not mounts.shows(scratch / "beside.txt")
    assert mounts.args.index("--tmpfs") < mounts.args.index(str(scratch / "venv"))
