"""Hermes-named tools against a real local sandbox: every tool's happy path, Hermes' result
shapes, confinement through the tools, and argument errors that never raise."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tinker_atropos.agent import task_sandboxes
from tinker_atropos.agent.sandboxes import SandboxConfig
from tinker_atropos.agent.tools import TOOL_SCHEMAS, TOOLSETS, ToolContext, select_tools

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ctx(tmp_path: Path) -> AsyncIterator[ToolContext]:
    task_sandboxes.configure(SandboxConfig(root=tmp_path, timeout_s=10, max_output_chars=4000), 128)
    async with task_sandboxes.task_sandbox("test-tools"):
        yield ToolContext("test-tools")


def wd(ctx: ToolContext) -> Path:
    """The rollout directory of `ctx`'s sandbox (a host path: the local backend)."""
    sandbox = task_sandboxes.find(ctx.task_id)
    assert sandbox is not None
    return Path(sandbox.workdir)


async def call(ctx: ToolContext, name: str, **args) -> tuple[dict, bool]:
    result = await ctx.call(name, args)
    return json.loads(result.content), result.error


def test_schemas_are_hermes_019() -> None:
    params = {n: list(s["function"]["parameters"]["properties"]) for n, s in TOOL_SCHEMAS.items()}
    assert params == {
        "terminal": [
            "command",
            "background",
            "timeout",
            "workdir",
            "pty",
            "notify_on_complete",
            "watch_patterns",
        ],
        "read_file": ["path", "offset", "limit"],
        "write_file": ["path", "content", "cross_profile"],
        "patch": [
            "mode",
            "path",
            "old_string",
            "new_string",
            "replace_all",
            "patch",
            "cross_profile",
        ],
        "search_files": [
            "pattern",
            "target",
            "path",
            "file_glob",
            "limit",
            "offset",
            "output_mode",
            "context",
        ],
    }
    assert all(s["type"] == "function" and s["function"]["name"] == n for n, s in TOOL_SCHEMAS.items())
    assert TOOLSETS == {
        "terminal": ("terminal",),
        "file": ("read_file", "write_file", "patch", "search_files"),
    }


def test_select_tools() -> None:
    assert select_tools(None, None) == [
        "terminal",
        "read_file",
        "write_file",
        "patch",
        "search_files",
    ]
    assert select_tools(["file"], None) == [
        "read_file",
        "write_file",
        "patch",
        "search_files",
    ]
    assert select_tools(None, ["file"]) == ["terminal"]
    with pytest.raises(ValueError, match="known toolsets: terminal, file"):
        select_tools(["web"], None)


async def test_terminal(ctx: ToolContext) -> None:
    assert await call(ctx, "terminal", command="echo hi; echo err >&2; exit 3") == (
        {"output": "hi\nerr", "exit_code": 3, "error": None},
        False,
    )
    out, _ = await call(ctx, "terminal", command="sleep 5", timeout=1)
    assert out == {
        "output": "[Command timed out after 1s]",
        "exit_code": 124,
        "error": None,
    }
    await call(ctx, "terminal", command="mkdir sub")
    out, _ = await call(ctx, "terminal", command="pwd", workdir="sub")
    assert out["output"] == str(wd(ctx) / "sub")
    out, error = await call(ctx, "terminal", command="sleep 1", background=True)
    assert error and "foreground" in out["error"]
    out, error = await call(ctx, "terminal", command="true", timeout=601)
    assert error and "maximum of 600s" in out["error"]
    out, _ = await call(ctx, "terminal", command="seq 1 100000")
    assert "[OUTPUT TRUNCATED" in out["output"] and len(out["output"]) < 4200


async def test_write_then_read(ctx: ToolContext) -> None:
    out, error = await call(ctx, "write_file", path="new/a.txt", content="alpha\nbeta\ngamma beta\n")
    resolved = str(wd(ctx) / "new" / "a.txt")
    assert not error and out == {
        "bytes_written": 22,
        "dirs_created": True,
        "resolved_path": resolved,
        "files_modified": [resolved],
    }
    out, _ = await call(ctx, "read_file", path="new/a.txt")
    assert out["content"] == "1|alpha\n2|beta\n3|gamma beta\n4|"
    assert (
        out["total_lines"],
        out["file_size"],
        out["truncated"],
        out["is_binary"],
    ) == (3, 22, False, False)
    out, _ = await call(ctx, "read_file", path="new/a.txt", offset=2, limit=1)
    assert out["content"] == "2|beta" and out["truncated"] and "offset=3" in out["hint"]
    out, error = await call(ctx, "read_file", path="nope.txt")
    assert error and out["error"] == "File not found: nope.txt"
    (wd(ctx) / "bin").write_bytes(b"\x00\x01")
    out, error = await call(ctx, "read_file", path="bin")
    assert error and out["is_binary"]
    (wd(ctx) / "long.txt").write_text(("x" * 100 + "\n") * 200)
    out, _ = await call(ctx, "read_file", path="long.txt")
    assert out["truncated"] and out["next_offset"] > 1 and len(out["content"]) < 4000


async def test_patch_replace_and_v4a(ctx: ToolContext) -> None:
    ctx.write_file("a.txt", "alpha\nbeta\ngamma beta\n")
    out, error = await call(
        ctx,
        "patch",
        mode="replace",
        path="a.txt",
        old_string="alpha",
        new_string="ALPHA",
    )
    assert not error and out["success"] and "-alpha\n+ALPHA" in out["diff"]
    out, error = await call(ctx, "patch", mode="replace", path="a.txt", old_string="beta", new_string="B")
    assert error and out["error"].startswith("Found 2 matches")
    out, error = await call(ctx, "patch", mode="replace", path="a.txt", old_string="zzz", new_string="B")
    assert error and "Could not find a match" in out["error"]
    out, error = await call(
        ctx,
        "patch",
        mode="replace",
        path="a.txt",
        old_string="beta",
        new_string="B",
        replace_all=True,
    )
    assert not error and (wd(ctx) / "a.txt").read_text() == "ALPHA\nB\ngamma B\n"
    v4a = "*** Begin Patch\n*** Update File: a.txt\n@@\n ALPHA\n-B\n+BETA\n*** Add File: n.txt\n+hello\n*** End Patch"
    out, error = await call(ctx, "patch", mode="patch", patch=v4a)
    assert not error and out["files_created"] == [str(wd(ctx) / "n.txt")]
    assert (wd(ctx) / "a.txt").read_text() == "ALPHA\nBETA\ngamma B\n" and (wd(ctx) / "n.txt").read_text() == "hello\n"
    out, error = await call(
        ctx,
        "patch",
        mode="patch",
        patch="*** Begin Patch\n*** Delete File: n.txt\n*** End Patch",
    )
    assert not error and not (wd(ctx) / "n.txt").is_file()
    out, error = await call(ctx, "patch", mode="replace", path="a.txt")
    assert error and "old_string, new_string" in out["error"]


async def test_search_files(ctx: ToolContext) -> None:
    ctx.write_file("a.txt", "alpha\nbeta\ngamma beta\n")
    ctx.write_file("sub/m.py", "def beta():\n    return 1\n")
    out, _ = await call(ctx, "search_files", pattern="beta")
    assert sorted((m["path"], m["line"], m["content"]) for m in out["matches"]) == [
        ("./a.txt", 2, "beta"),
        ("./a.txt", 3, "gamma beta"),
        ("./sub/m.py", 1, "def beta():"),
    ]
    out, _ = await call(ctx, "search_files", pattern="beta", output_mode="files_only")
    assert sorted(out["files"]) == ["./a.txt", "./sub/m.py"]
    out, _ = await call(ctx, "search_files", pattern="beta", output_mode="count")
    assert out == {"total_count": 3, "counts": {"./a.txt": 2, "./sub/m.py": 1}}
    out, _ = await call(ctx, "search_files", pattern="beta", file_glob="*.py", path="sub")
    assert [m["path"] for m in out["matches"]] == ["sub/m.py"]
    out, _ = await call(ctx, "search_files", pattern="*.py", target="files")
    assert out == {"total_count": 1, "files": ["./sub/m.py"]}
    out, _ = await call(ctx, "search_files", pattern="beta", limit=1)
    assert len(out["matches"]) == 1 and out["truncated"]
    out, error = await call(ctx, "search_files", pattern="(")
    assert error and "grep" in out["error"]
    assert (ctx.terminal("pwd"))["output"] == str(wd(ctx))  # cwd untouched


async def test_file_tools_cannot_escape(ctx: ToolContext, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    (wd(ctx) / "link").symlink_to(secret)
    (wd(ctx) / "dirlink").symlink_to(tmp_path)
    for name, args in [
        ("read_file", {"path": "../../secret.txt"}),
        ("read_file", {"path": str(secret)}),
        ("read_file", {"path": "link"}),
        ("write_file", {"path": "dirlink/new.txt", "content": "x"}),
        ("write_file", {"path": "/tmp/escaped.txt", "content": "x"}),
        (
            "patch",
            {"mode": "replace", "path": "link", "old_string": "top", "new_string": "x"},
        ),
        ("search_files", {"pattern": "secret", "path": ".."}),
        ("terminal", {"command": "pwd", "workdir": "/etc"}),
    ]:
        out, error = await call(ctx, name, **args)
        assert error and "outside the sandbox" in out["error"], (name, args, out)
    assert secret.read_text() == "top secret" and not (tmp_path / "new.txt").exists()
    assert "outside the sandbox" in ctx.read_file("link")["error"]  # Hermes' ToolContext, as reward code calls it


async def test_bad_calls_are_results_not_exceptions(ctx: ToolContext) -> None:
    out, error = await call(ctx, "browser_navigate", url="x")
    assert error and "Unknown tool" in out["error"] and "terminal, read_file" in out["error"]
    out, error = await call(ctx, "read_file")
    assert (
        error and "'path' is a required property" in out["error"] and "Parameters: path, offset, limit" in out["error"]
    )
    out, error = await call(ctx, "terminal", command=42)
    assert error and "command: 42 is not of type 'string'" in out["error"]
    out, error = await call(ctx, "read_file", path="a", limit=5000)
    assert error and "limit" in out["error"]
    result = await ctx.call("terminal", ["ls"])  # type: ignore[arg-type]
    assert result.error and "JSON object" in result.content


async def test_context_limits_offered_tools(tmp_path: Path) -> None:
    task_sandboxes.configure(SandboxConfig(root=tmp_path), 128)
    async with task_sandboxes.task_sandbox("limited"):
        ctx = ToolContext("limited", select_tools(["file"], None))
        assert [s["function"]["name"] for s in ctx.schemas] == [
            "read_file",
            "write_file",
            "patch",
            "search_files",
        ]
        out = json.loads((await ctx.call("terminal", {"command": "ls"})).content)
        assert "Unknown tool: 'terminal'" in out["error"]
        assert (ctx.terminal("echo reward-side"))["output"] == "reward-side"  # reward code may
