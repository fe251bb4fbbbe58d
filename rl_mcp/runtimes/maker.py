"""A runtime made once, safely: one maker at a time, never half-made, reused offline.

A maker holds `<runtimes>/.locks/<name>.lock` (flock: two servers, or a server and `mcp-server-rl setup`,
wait for each other), builds the venv under a temporary name and renames it into place only once every
install pass succeeded and its record is written; anything else (an error, a cancelled call, a killed
process: the next maker clears it) leaves no folder of that name. A made runtime is found by its record
and used as it is, offline.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from pathlib import Path

import anyio
import httpx

from rl_mcp.distribution import command_line
from rl_mcp.errors import UserError
from rl_mcp.runtimes import installer
from rl_mcp.runtimes.catalog import RuntimeSpec
from rl_mcp.runtimes.pythons import find_python
from tinker_atropos.venvs import runtime_venv

RECORD = "rl-mcp-runtime.json"
PRODUCT_PTH = "_rl_mcp_product.pth"
INSTALL_TIMEOUT_S = 3600.0
REGISTRY_PROBE_S = 5.0
LOCK_POLL_S = 0.2
FREE_GB = {"training": 4.0, "skyrl-engine": 10.0, "vllm": 8.0}
DEFAULT_FREE_GB = 2.0


class RuntimeUnavailable(UserError):
    """A runtime could not be made; nothing was left behind, and the message names the command to run."""


def is_made(venv: Path) -> bool:
    return (venv / RECORD).is_file() and (venv / "bin" / "python").exists()


async def ensure(spec: RuntimeSpec, environ: dict[str, str], report: installer.Report) -> Path:
    """The runtime's venv, made first when it is not (progress through `report`)."""
    venv = runtime_venv(spec.name, environ)
    if is_made(venv):
        return venv
    async with _lock(venv, report):
        if is_made(venv):  # another maker finished it while this one waited
            return venv
        await _make(spec, venv, environ, report)
    return venv


class _lock:
    """The flock of one runtime's maker, polled so that a cancelled wait ends at once."""

    def __init__(self, venv: Path, report: installer.Report) -> None:
        self.path = venv.parent / ".locks" / f"{venv.name}.lock"
        self.report = report
        self.fd = -1

    async def __aenter__(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        told = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if not told:
                    await self.report(f"waiting for another maker of {self.path.stem} (it holds {self.path})")
                    told = True
                try:
                    await anyio.sleep(LOCK_POLL_S)
                except BaseException:
                    os.close(self.fd)
                    raise

    async def __aexit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


async def _make(spec: RuntimeSpec, venv: Path, environ: dict[str, str], report: installer.Report) -> None:
    by_hand = command_line("setup", spec.name)
    if spec.unavailable:
        raise RuntimeUnavailable(f"the {spec.name} runtime cannot be made on this machine: {spec.unavailable}")
    tool = installer.choose(environ)
    base = await _base_python(spec, environ, tool, by_hand)
    _clear_leftovers(venv)
    _check_disk(spec, venv, by_hand)
    offline = not await _registry_reachable(environ)
    if offline and not tool.uv:
        raise RuntimeUnavailable(
            f"could not make the {spec.name} runtime: the package registry cannot be reached and pip has no "
            f"offline cache to make it from. Connect, then run `{by_hand}`"
        )
    scratch = venv.with_name(f".{venv.name}.tmp-{os.getpid()}")
    started = time.monotonic()
    await report(
        f"making the {spec.name} runtime in {venv} with {tool.name}{' (offline, from its cache)' if offline else ''}: "
        f"{spec.size}"
    )
    try:
        await _step(tool.make_venv(base, scratch, offline=offline), environ, report, spec, by_hand)
        for args in spec.passes:
            await _step(tool.install(scratch, args, environ, offline=offline), environ, report, spec, by_hand)
        if spec.removes:
            await _step(tool.uninstall(scratch, spec.removes), environ, report, spec, by_hand)
        if spec.layer_product:
            _layer_product(scratch)
        record = {
            "name": spec.name,
            "passes": [list(p) for p in spec.passes],
            "removed": list(spec.removes),
            "installer": tool.name,
            "python": base,
            "seconds": round(time.monotonic() - started, 1),
            "made_at": time.time(),
            "bytes": await anyio.to_thread.run_sync(folder_bytes, scratch),
        }
        (scratch / RECORD).write_text(json.dumps(record, indent=1))
        _repoint(scratch, venv)
        scratch.rename(venv)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(lambda: shutil.rmtree(scratch, ignore_errors=True))
        raise
    await report(f"made the {spec.name} runtime in {time.monotonic() - started:.0f} s: {venv}")


async def _step(
    argv: list[str], environ: dict[str, str], report: installer.Report, spec: RuntimeSpec, by_hand: str
) -> None:
    code, lines = await installer.run_streamed(
        argv, environ, report, prefix=f"{spec.name}: ", timeout_s=INSTALL_TIMEOUT_S
    )
    if code == 0:
        return
    tail = "\n".join(lines[-12:])
    why = "the disk is full" if "No space left on device" in tail else f"`{' '.join(argv)}` failed (exit {code})"
    raise RuntimeUnavailable(
        f"could not make the {spec.name} runtime: {why}. Nothing was left behind. Its last lines:\n{tail}\n"
        f"Fix that, then run `{by_hand}`"
    )


async def _base_python(spec: RuntimeSpec, environ: dict[str, str], tool: installer.Installer, by_hand: str) -> str:
    """The interpreter the runtime's venv is made on: the server's own, or the version it needs."""
    if spec.python == "server":
        return sys.executable
    found = await anyio.to_thread.run_sync(find_python, spec.python, environ)
    if found is not None:
        return found
    if tool.uv:
        return spec.python  # uv finds one, or fetches a managed one
    var = f"RL_MCP_PYTHON{spec.python.replace('.', '')}"
    raise RuntimeUnavailable(
        f"the {spec.name} runtime needs Python {spec.python}, and none was found ({var}, pyenv, PATH): install "
        f"it (or uv, which fetches one), or set {var} to one, then run `{by_hand}`"
    )


def _clear_leftovers(venv: Path) -> None:
    """A killed maker's scratch folder (the lock is held: no maker is using it)."""
    for old in venv.parent.glob(f".{venv.name}.tmp-*"):
        shutil.rmtree(old, ignore_errors=True)
    if venv.exists() and not is_made(venv):
        shutil.rmtree(venv, ignore_errors=True)


def _check_disk(spec: RuntimeSpec, venv: Path, by_hand: str) -> None:
    venv.parent.mkdir(parents=True, exist_ok=True)
    need = FREE_GB.get(spec.name, DEFAULT_FREE_GB)
    free = shutil.disk_usage(venv.parent).free / 1e9
    if free < need:
        raise RuntimeUnavailable(
            f"could not make the {spec.name} runtime: {venv.parent} has {free:.1f} GB free, and it needs about "
            f"{need:g} GB. Free some space (or set RL_MCP_RUNTIMES to a folder on a larger disk), then run `{by_hand}`"
        )


async def _registry_reachable(environ: dict[str, str]) -> bool:
    url = next(
        (environ[v] for v in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL") if environ.get(v)),
        "https://pypi.org/simple/",
    )
    if url.startswith("file:"):
        return True
    try:
        async with httpx.AsyncClient(timeout=REGISTRY_PROBE_S) as client:
            await client.head(url)
        return True
    except httpx.HTTPError:
        return False


def _layer_product(venv: Path) -> None:
    """The product's own packages, as the server has them installed, seen after the runtime's own."""
    import rl_mcp
    import tinker_atropos

    roots = dict.fromkeys(str(Path(p.__path__[0]).resolve().parent) for p in (rl_mcp, tinker_atropos))
    for site in venv.glob("lib/python3*/site-packages"):
        (site / PRODUCT_PTH).write_text("".join(f"{root}\n" for root in roots))


def _repoint(scratch: Path, venv: Path) -> None:
    """Scripts and activation files name the folder they were made in: the final name, before the rename."""
    old, new = str(scratch).encode(), str(venv).encode()
    for path in [*(scratch / "bin").iterdir(), scratch / "pyvenv.cfg"]:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > 1_000_000:
            continue
        data = path.read_bytes()
        if old in data:
            path.write_bytes(data.replace(old, new))


def folder_bytes(folder: Path) -> int:
    """What a folder holds on disk (its hardlinked files counted once each, as uv's cache shares them)."""
    seen: set[int] = set()
    total = 0
    for root, _, names in os.walk(folder):
        for name in names:
            st = os.lstat(os.path.join(root, name))
            if st.st_ino not in seen:
                seen.add(st.st_ino)
                total += st.st_blocks * 512
    return total
