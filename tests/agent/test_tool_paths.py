"""The file tools name files as the rollout's shell does, and never reach past its directory.

For every file tool and every way a policy names a path (`~`, `/workspace`, relative to the
shell's current directory, `..`, the absolute host path, a symlink made inside), the shell makes
or reads the file and the tool acts on the same one. Every escape (`..` out, an absolute host
path, a symlink made inside that points out, another user's `~`, a shell that `cd`'d out) is
refused, and the host's sentinel file is neither read nor changed."""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tinker_atropos.agent import task_sandboxes
from tinker_atropos.agent.sandboxes import SandboxConfig
from tinker_atropos.agent.sandboxes.bwrap import probe
from tinker_atropos.agent.tools import ToolContext

pytestmark = pytest.mark.anyio
TOOLS = ("read_file", "write_file", "patch", "search_files")
SECRET = "host secret 7f3a"

# kind: (shell command run first, the tool's name for the file, the shell's name for it)
AGREE = {
    "home": ("mkdir -p ~/notes", "~/notes/a.txt", "~/notes/a.txt"),
    "workspace": ("mkdir -p ~/notes", "/workspace/notes/a.txt", "~/notes/a.txt"),
    "relative to the shell's cwd": ("mkdir -p notes && cd notes", "a.txt", "a.txt"),
    "dotdot inside": ("mkdir -p notes", "notes/../notes/a.txt", "notes/../notes/a.txt"),
    "absolute host path inside": ("mkdir -p notes", "{work}/notes/a.txt", "{work}/notes/a.txt"),
    "symlink inside": ("mkdir -p notes && ln -s notes linked", "linked/a.txt", "linked/a.txt"),
}
# kind: (shell command run first, the tool's path)
ESCAPES = {
    "dotdot out": ("true", "../../../../../../../..{secret}"),
    "absolute host path": ("true", "{secret}"),
    "symlink made inside": ("ln -s {secret} out.txt && ln -s {host} outdir", "{link}"),
    "another user's home": ("true", "~root/.bashrc"),
    "workspace dotdot": ("true", "/workspace/../../../../../..{secret}"),
    "shell cwd outside": ("cd {host} || cd /usr", "secret.txt"),
}


@pytest.fixture(params=["local", "bwrap"])
async def ctx(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ToolContext]:
    if request.param == "bwrap" and (missing := probe()) is not None:
        pytest.skip(f"bwrap cannot run here: {missing}")
    task_sandboxes.configure(SandboxConfig(backend=request.param, root=tmp_path / "sandboxes", timeout_s=10), 128)
    async with task_sandboxes.task_sandbox("paths"):
        yield ToolContext("paths")


def _work(ctx: ToolContext) -> str:
    """The rollout directory as the sandbox's shell names it (bwrap: /workspace)."""
    return _shell(ctx, "pwd")


async def _call(ctx: ToolContext, name: str, **args: object) -> tuple[dict, bool]:
    result = await ctx.call(name, dict(args))
    return json.loads(result.content), result.error


def _shell(ctx: ToolContext, command: str) -> str:
    out = ctx.terminal(command)
    assert out["exit_code"] == 0, (command, out)
    return out["output"]


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("kind", list(AGREE))
async def test_file_tools_and_the_shell_name_the_same_file(ctx: ToolContext, tool: str, kind: str) -> None:
    setup, tool_path, shell_path = (s.format(work=_work(ctx)) for s in AGREE[kind])
    _shell(ctx, setup)
    if tool == "write_file":
        out, error = await _call(ctx, tool, path=tool_path, content="alpha beta\n")
        assert not error, out
        assert _shell(ctx, f"cat {shell_path}") == "alpha beta"
        if os.geteuid() == 0 and _work(ctx) == "/workspace":  # bwrap: written inside, by its user
            assert _shell(ctx, f"stat -c %u {shell_path}") == "65534"
        return
    _shell(ctx, f"printf 'alpha beta\\n' > {shell_path}")
    if tool == "read_file":
        out, error = await _call(ctx, tool, path=tool_path)
        assert not error and out["content"].split("\n")[0] == "1|alpha beta", out
    elif tool == "patch":
        out, error = await _call(ctx, tool, mode="replace", path=tool_path, old_string="beta", new_string="gamma")
        assert not error and out["success"], out
        assert _shell(ctx, f"cat {shell_path}") == "alpha gamma"
    else:
        folder = posixpath.dirname(tool_path) or "."
        out, error = await _call(ctx, tool, pattern="beta", path=folder)
        assert not error and out["total_count"] == 1, out
        assert out["matches"][0]["content"] == "alpha beta"


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("kind", list(ESCAPES))
async def test_file_tools_cannot_reach_past_the_rollout_directory(
    ctx: ToolContext, tmp_path: Path, tool: str, kind: str
) -> None:
    host = tmp_path / "host"
    host.mkdir()
    secret = host / "secret.txt"
    secret.write_text(SECRET + "\n")
    link = "outdir/new.txt" if tool == "write_file" else "out.txt"
    setup, path = (s.format(secret=secret, host=host, link=link) for s in ESCAPES[kind])
    ctx.terminal(setup)  # bwrap's shell may not see the host's paths at all: what matters is the tool
    if tool == "read_file":
        out, error = await _call(ctx, tool, path=path)
    elif tool == "write_file":
        out, error = await _call(ctx, tool, path=path.replace("secret.txt", "new.txt"), content="pwned")
    elif tool == "patch":
        out, error = await _call(ctx, tool, mode="replace", path=path, old_string="host", new_string="pwned")
    else:
        out, error = await _call(ctx, tool, pattern="secret", path=posixpath.dirname(path) or path)
    assert error, out
    assert "outside the sandbox" in out["error"] or "another user's home" in out["error"], out
    assert SECRET not in json.dumps(out)
    assert secret.read_text() == SECRET + "\n" and sorted(p.name for p in host.iterdir()) == ["secret.txt"]


async def test_a_symlink_swapped_in_after_resolving_is_not_followed(ctx: ToolContext, tmp_path: Path) -> None:
    """The path is checked, then opened component by component without following links: a
    directory replaced by a link in between (a background process of the policy's) stops the
    write instead of sending it outside."""
    from tinker_atropos.agent.sandboxes import SandboxEscape, confined_fs

    sandbox = task_sandboxes.find(ctx.task_id)
    assert sandbox is not None
    work = Path(sandbox.workdir)
    (work / "d").mkdir()
    target = (work / "d" / "x.txt").resolve()  # resolved while d was a directory
    (work / "d").rmdir()
    (work / "d").symlink_to(tmp_path)
    with pytest.raises(SandboxEscape, match="symlink"):
        confined_fs.write(work, target, b"pwned", "d/x.txt")
    assert not (tmp_path / "x.txt").exists()
