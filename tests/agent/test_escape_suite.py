"""The escape suite: every attack of escape_attacks.py against every sandbox backend this
machine has (`local` always, `bwrap` where its probe succeeds, `docker` where a daemon answers),
each with the outcome expected of that backend. bwrap must block all of them; the table of what
each backend blocked is printed at the end of the run (tests/agent/conftest.py)."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict
from pathlib import Path

import psutil
import pytest
from escape_attacks import ATTACKS, BLOCKED, ESCAPES, RESULTS, ROOT_USER, SKIP, Attack, Outcome, World, expected

from tinker_atropos.agent import task_sandboxes
from tinker_atropos.agent.sandboxes import SandboxConfig, SandboxUnavailable, open_sandbox
from tinker_atropos.agent.sandboxes.bwrap import probe
from tinker_atropos.agent.tools import ToolContext

pytestmark = pytest.mark.anyio
BACKENDS = ("local", "bwrap", "docker")
ROOT = Path(__file__).resolve().parents[2]


def _suite_config(backend: str, world: World) -> SandboxConfig:
    return SandboxConfig(
        backend=backend,
        timeout_s=3,
        max_output_chars=4000,
        max_drain_bytes=8 * 1024**2,
        file_size_bytes=16 * 1024**2,
        max_disk_bytes=64 * 1024**2,
        max_processes=64,
        ro_paths=(str(world.setuid_dir),) if world.setuid_dir else (),
    )


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    token = secrets.token_hex(8)
    home = Path(os.path.expanduser("~"))
    host_dir = Path(tempfile.mkdtemp(prefix="rl-mcp-host-"))
    host_file = host_dir / "secret.txt"
    host_file.write_text(f"secret {token}\n")
    setuid_dir = None
    if ROOT_USER:
        setuid_dir = Path(tempfile.mkdtemp(prefix="rl-mcp-setuid-"))
        setuid_dir.chmod(0o755)
        shutil.copy("/usr/bin/id", setuid_dir / "id")
        (setuid_dir / "id").chmod(0o4755)
    seconds = 900000 + secrets.randbelow(99999)
    victim = subprocess.Popen(["sleep", str(seconds)])
    w = World(
        token,
        home / f".rl-mcp-escape-sentinel-{secrets.token_hex(4)}",
        host_dir,
        host_file,
        setuid_dir,
        victim,
        seconds,
    )
    w.home_sentinel.write_text(f"sentinel {token}\n")
    server = w.serve_tcp()
    try:
        yield w
    finally:
        server.close()
        w.restore()
        w.victim.kill()
        w.home_sentinel.unlink(missing_ok=True)
        shutil.rmtree(host_dir, ignore_errors=True)
        if setuid_dir:
            shutil.rmtree(setuid_dir, ignore_errors=True)


@pytest.fixture(scope="module")
async def available() -> AsyncIterator[dict[str, str | None]]:
    """backend -> None if it runs here, else why not."""
    reasons: dict[str, str | None] = {"local": None, "bwrap": probe()}
    try:
        async with open_sandbox(SandboxConfig(backend="docker")):
            reasons["docker"] = None
    except SandboxUnavailable as exc:
        reasons["docker"] = str(exc)
    yield reasons


def _marked(root: Path) -> list[int]:
    alive = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and p.environ().get("RL_MCP_SANDBOX") == str(root):
                alive.append(p.pid)
        except psutil.Error:
            pass
    return alive


# The sandbox's owner as in a run: an environment process started with keys in its environment.
OWNER = """
import asyncio, json, sys
from tinker_atropos.agent.sandboxes import SandboxConfig, open_sandbox

async def main():
    async with open_sandbox(SandboxConfig(**json.loads(sys.argv[1]))) as sb:
        r = await sb.run(sys.argv[2])
        print(json.dumps({"text": r.output, "root": str(getattr(sb, "root", "/")), "workdir": str(sb.workdir)}))

asyncio.run(main())
"""


def _attack_from_owner(attack: Attack, world: World, config: SandboxConfig) -> Outcome:
    secrets_env = {"RL_MCP_ESCAPE_SECRET": world.token, "TINKER_API_KEY": f"tml-{world.token}"}
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tinker-atropos'}", **secrets_env}
    fields = {k: v for k, v in asdict(config).items() if k != "root"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", OWNER, json.dumps(fields), world.fmt(str(attack.action))],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    out = json.loads(done.stdout.strip().splitlines()[-1])
    outcome = Outcome(out["text"], None, Path(out["root"]), Path(out["workdir"]), time.monotonic() - started, [])
    return _judged(attack, world, outcome)


def _judged(attack: Attack, world: World, outcome: Outcome) -> Outcome:
    if attack.escaped(world, outcome):
        outcome.text += "\n[escaped]"
    return outcome


async def _attack(attack: Attack, world: World, config: SandboxConfig) -> Outcome:
    if attack.owner_holds_secrets:
        return _attack_from_owner(attack, world, config)
    task_sandboxes.configure(config, 8)
    task_id = f"escape-{secrets.token_hex(4)}"
    async with task_sandboxes.task_sandbox(task_id) as sandbox:
        root = Path(getattr(sandbox, "root", "/"))
        workdir = Path(sandbox.workdir)
        started = time.monotonic()
        if isinstance(attack.action, str):
            result = await sandbox.run(world.fmt(attack.action))
            text, code = result.output, result.exit_code
        else:
            tool, args = attack.action
            done = await ToolContext(task_id).call(
                tool, {k: world.fmt(v) if isinstance(v, str) else v for k, v in args.items()}
            )
            text, code = done.content, None
        seconds = time.monotonic() - started
        if attack.leaves_processes:
            time.sleep(0.3)  # a process that outlives its command has had the time to show it
        return _judged(attack, world, Outcome(text, code, root, workdir, seconds, _marked(root)))


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
@pytest.mark.parametrize("backend", BACKENDS)
async def test_attack(backend: str, attack: Attack, world: World, available: dict[str, str | None]) -> None:
    if available[backend] is not None:
        RESULTS.append((backend, attack.name, expected(attack, backend), "not available"))
        pytest.skip(f"{backend} is not available here: {available[backend]}")
    want = expected(attack, backend)
    if want == SKIP:
        RESULTS.append((backend, attack.name, SKIP, SKIP))
        pytest.skip(attack.why_skip or "cannot be set up here (needs root)")
    outcome = await _attack(attack, world, _suite_config(backend, world))
    got = ESCAPES if outcome.text.endswith("[escaped]") else BLOCKED
    RESULTS.append((backend, attack.name, want, got))
    if got == ESCAPES:
        world.restore()
    assert got == want, f"{attack.name} on {backend}: expected {want}, got {got}: {outcome.text[-600:]}"
