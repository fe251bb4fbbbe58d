"""`python -m tinker_atropos.mcp_tools.probe FILE TIMEOUT [NAME ...]`: each server's tools, read
through a real session (`initialize` + `tools/list`), printed as JSON after a marker line.

The server runs this as a child, so a server that hangs or crashes costs it a bounded wait and leaves
nothing behind (each session closes its process; the child's exit takes the rest).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio

from tinker_atropos.mcp_tools.servers_file import PROBE_MARKER, ServerSpec, read_servers
from tinker_atropos.mcp_tools.sessions import ServerUnavailable, list_tools, open_session


async def probe_one(spec: ServerSpec, timeout_s: float) -> dict[str, Any]:
    """{"tools": [...]} or {"error": "..."} for one server."""
    try:
        async with open_session(spec, start_timeout_s=timeout_s) as session:
            with anyio.fail_after(timeout_s):
                tools = await list_tools(session)
        return {"tools": [t.to_json() for t in tools]}
    except ServerUnavailable as exc:
        return {"error": str(exc)}
    except TimeoutError:
        return {"error": f"server {spec.name!r} did not answer tools/list within {timeout_s:g} s"}
    except Exception as exc:
        return {"error": f"server {spec.name!r}: {type(exc).__name__}: {exc}"}


async def probe(path: Path, timeout_s: float, names: list[str]) -> dict[str, Any]:
    found = read_servers(path)
    out: dict[str, Any] = {name: {"error": err} for name, err in found.errors.items()}
    wanted = [s for n, s in found.servers.items() if not names or n in names]

    async def one(spec: ServerSpec) -> None:
        out[spec.name] = await probe_one(spec, timeout_s)

    async with anyio.create_task_group() as tg:
        for spec in wanted:
            tg.start_soon(one, spec)
    return out


def main(argv: list[str]) -> int:
    path, timeout_s, names = Path(argv[0]), float(argv[1]), argv[2:]
    result = anyio.run(probe, path, timeout_s, names)
    sys.stdout.write(f"\n{PROBE_MARKER}\n{json.dumps(result)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
