"""`mcp-server-rl setup [RUNTIME ...]`: the runtimes made ahead, before a client opens the server (the tools
make each on first use otherwise), with progress on stderr. The checkout's make targets run it too."""

from __future__ import annotations

import argparse
import sys

from rl_mcp import interrupts
from rl_mcp.errors import UserError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from rl_mcp.runtimes.catalog import NAMES

    setup = sub.add_parser("setup", help="make the runtimes the tools would make on first use (default: training)")
    setup.add_argument("runtimes", nargs="*", metavar="RUNTIME", help=f"{', '.join(NAMES)} or all (default: training)")


def run(args: argparse.Namespace) -> int:
    import os

    from rl_mcp.runtimes import ensure_runtime
    from rl_mcp.runtimes.catalog import NAMES

    asked = args.runtimes or ["training"]
    unknown = [n for n in asked if n not in (*NAMES, "all")]
    if unknown:
        print(
            f"mcp-server-rl setup: unknown runtime {unknown[0]!r}: choose from {', '.join(NAMES)} or all",
            file=sys.stderr,
        )
        return 2
    names = list(NAMES) if "all" in asked else list(dict.fromkeys(asked))

    async def report(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    async def make_all() -> None:
        for name in names:
            python = await ensure_runtime(name, os.environ, report)
            print(f"{name}: {python}", flush=True)

    try:
        interrupts.run(make_all)  # a signal stops the installer; its half-made folder is removed
    except UserError as exc:
        print(f"mcp-server-rl setup: {exc}", file=sys.stderr)
        return 1
    return 0
