"""Local sandboxes with real subprocesses: limits, output bounds, confinement, secrets, cleanup
(on exit and after the owner is SIGKILLed), lifetime; docker's probe; unsupported backends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import anyio
import psutil
import pytest

from tinker_atropos.agent.sandboxes import (
    SandboxConfig,
    SandboxEscape,
    SandboxExpired,
    SandboxUnavailable,
    open_sandbox,
)

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


def marked(root: Path) -> list[psutil.Process]:
    """Live (non-zombie) processes carrying this sandbox's marker."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("RL_MCP_SANDBOX") == str(root):
                found.append(p)
        except psutil.Error:
            pass
    return found


def wait_until(check, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def cfg(tmp_path: Path, **kw) -> SandboxConfig:
    return SandboxConfig(root=tmp_path, timeout_s=10, **kw)


async def test_run_merges_output_and_keeps_shell_state(tmp_path: Path) -> None:
    async with open_sandbox(cfg(tmp_path)) as sb:
        r = await sb.run("echo out; echo err >&2; exit 3")
        assert (r.exit_code, r.output, r.timed_out, r.truncated) == (
            3,
            "out\nerr\n",
            False,
            False,
        )
        await sb.run("mkdir -p d && cd d && export GREETING=hi")
        r = await sb.run('pwd; echo "$GREETING"; echo "$HOME"')
        assert r.output.split() == [str(sb.workdir / "d"), "hi", str(sb.workdir)]


async def test_environment_holds_no_secrets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("FOO_API_KEY", "GITHUB_TOKEN", "MY_SECRET_THING", "TINKER_API_KEY"):
        monkeypatch.setenv(name, "hunter2")
    async with open_sandbox(cfg(tmp_path)) as sb:
        env = (await sb.run("env")).output
    assert "hunter2" not in env and "API_KEY" not in env and "TOKEN" not in env and "SECRET" not in env
    names = {line.split("=", 1)[0] for line in env.splitlines() if "=" in line}
    assert {"PATH", "HOME", "TMPDIR"} <= names
    assert f"TMPDIR={sb.workdir / '.tmp'}" in env


async def test_rlimits_are_applied(tmp_path: Path) -> None:
    config = cfg(tmp_path, cpu_time_s=77, memory_bytes=2 * 1024**3, file_size_bytes=1024 * 1024)
    async with open_sandbox(config) as sb:
        r = await sb.run("ulimit -t; ulimit -v; ulimit -f; ulimit -u")
        assert r.output.split() == ["77", str(2 * 1024**2), "1024", "4096"]
        r = await sb.run("head -c 2000000 /dev/zero > big; stat -c %s big")
        assert r.output.split()[-1] == str(1024 * 1024)


async def test_hanging_command_is_killed_with_its_group(tmp_path: Path) -> None:
    async with open_sandbox(cfg(tmp_path)) as sb:
        start = time.monotonic()
        r = await sb.run("echo before; sleep 1000 & sleep 1000", timeout_s=1)
        assert time.monotonic() - start < 4
        assert (r.exit_code, r.timed_out) == (None, True) and "before" in r.output
        assert wait_until(lambda: not marked(sb.root))


async def test_output_floods_are_cut_and_bounded(tmp_path: Path) -> None:
    async with open_sandbox(cfg(tmp_path, max_output_chars=1000, max_drain_bytes=8 * 1024**2)) as sb:
        r = await sb.run("yes | head -c 5000000")
        assert (r.exit_code, r.truncated, r.timed_out) == (0, True, False)
        assert len(r.output) < 1200 and "chars omitted out of 5000000 total" in r.output
        start = time.monotonic()
        r = await sb.run("yes", timeout_s=30)
        assert time.monotonic() - start < 10
        assert r.exit_code is None and r.truncated and not r.timed_out
        assert len(r.output) < 1300 and "command killed" in r.output
        assert wait_until(lambda: not marked(sb.root))


async def test_fifty_megabytes_stay_bounded(tmp_path: Path) -> None:
    async with open_sandbox(cfg(tmp_path)) as sb:
        r = await sb.run("yes | head -c 50000000")
    assert r.exit_code == 0 and r.truncated and len(r.output) < sb.config.max_output_chars + 200


async def test_resolve_confines_paths(tmp_path: Path) -> None:
    async with open_sandbox(cfg(tmp_path)) as sb:
        (sb.workdir / "inner").mkdir()
        (sb.workdir / "ok").symlink_to(sb.workdir / "inner")
        (sb.workdir / "out").symlink_to("/etc")
        assert sb.resolve("ok/x.txt") == sb.workdir / "inner" / "x.txt"
        assert sb.resolve(".") == sb.workdir
        assert sb.resolve(str(sb.workdir / "a")) == sb.workdir / "a"
        for bad in ("../x", "inner/../../x", "/etc/passwd", "out/passwd", "~/../x"):
            with pytest.raises(SandboxEscape, match="outside the sandbox"):
                sb.resolve(bad)


async def test_lifetime_refuses_further_work(tmp_path: Path) -> None:
    async with open_sandbox(cfg(tmp_path, lifetime_s=0.3)) as sb:
        assert (await sb.run("true")).exit_code == 0
        await anyio.sleep(0.4)
        with pytest.raises(SandboxExpired, match="lifetime of 0.3s"):
            await sb.run("true")
        with pytest.raises(SandboxExpired):
            await sb.write_bytes("a.txt", b"x")


async def test_exit_kills_everything_and_removes_the_dir(tmp_path: Path) -> None:
    async with open_sandbox(cfg(tmp_path)) as sb:
        await sb.run("sleep 1000 & (setsid sleep 1000 &) ; chmod -w .tmp; echo ok")
        root = sb.root
        assert wait_until(lambda: len(marked(root)) >= 2)
    assert not root.exists()
    assert wait_until(lambda: not marked(root))


OWNER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from tinker_atropos.agent.sandboxes import SandboxConfig, open_sandbox

    async def main():
        async with open_sandbox(SandboxConfig(root=Path(sys.argv[1]), timeout_s=600)) as sb:
            print(sb.root, flush=True)
            await sb.run("sleep 1000 & sleep 1000")

    asyncio.run(main())
    """
)


def test_owner_killed_leaves_no_process_and_dir_is_swept(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'tinker-atropos'}")
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(tmp_path)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    root = Path(owner.stdout.readline().strip())
    assert wait_until(lambda: len([p for p in marked(root) if p.name() == "sleep"]) == 2, 10)
    owner.send_signal(signal.SIGKILL)
    owner.wait()
    assert wait_until(lambda: not marked(root)), [p.cmdline() for p in marked(root)]
    assert root.exists()  # the owner had no chance to clean up ...

    async def next_sandbox() -> None:  # ... so the next sandbox sweeps it
        async with open_sandbox(cfg(tmp_path)) as sb:
            assert not root.exists() and sb.root.exists()

    anyio.run(next_sandbox)


async def test_docker_without_daemon_says_how_to_fix(tmp_path: Path) -> None:
    try:
        async with open_sandbox(cfg(tmp_path, backend="docker")):
            pass
    except SandboxUnavailable as exc:
        message = str(exc)
    else:
        pytest.skip("a docker daemon is reachable here")
    assert "not reachable" in message and "terminal_backend=local" in message and "dockerd" in message


@pytest.mark.parametrize(
    ("backend", "needs"),
    [
        ("modal", "modal"),
        ("daytona", "DAYTONA_API_KEY"),
        ("ssh", "SSH host"),
        ("singularity", "apptainer"),
    ],
)
async def test_unsupported_backends_say_what_they_need(tmp_path: Path, backend: str, needs: str) -> None:
    with pytest.raises(SandboxUnavailable) as info:
        async with open_sandbox(cfg(tmp_path, backend=backend)):
            pass
    assert needs in str(info.value) and "auto, local, bwrap, docker" in str(info.value)


async def test_unknown_backend_lists_all(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="unknown terminal_backend 'vm'") as info:
        async with open_sandbox(cfg(tmp_path, backend="vm")):
            pass
    for name in ("local", "docker", "modal", "daytona", "ssh", "singularity"):
        assert name in str(info.value)
