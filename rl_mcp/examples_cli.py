"""`mcp-server-rl examples [DEST]`: the examples the docs point to (client configs, the Hermes skill, custom and
ported environments), installed with the package under `<prefix>/share/rl-mcp/examples`, copied out."""

from __future__ import annotations

import argparse
import shutil
import sys
import sysconfig
from pathlib import Path


def installed_examples() -> Path | None:
    """Where the package's examples were installed (its environment's `data` scheme), if they were."""
    for base in dict.fromkeys([sysconfig.get_path("data"), sys.prefix]):
        folder = Path(base) / "share" / "rl-mcp" / "examples"
        if folder.is_dir():
            return folder
    return None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    examples = sub.add_parser("examples", help="copy the examples the docs point to into a folder")
    examples.add_argument("dest", nargs="?", type=Path, help="a new folder (without it: where they are)")


def run(args: argparse.Namespace) -> int:
    source = installed_examples()
    if source is None:
        print(
            "mcp-server-rl examples: this install has no examples (its package was built without them)", file=sys.stderr
        )
        return 1
    if args.dest is None:
        print(source)
        return 0
    dest: Path = args.dest.expanduser()
    if dest.exists() and any(dest.iterdir()):
        print(f"mcp-server-rl examples: {dest} exists and is not empty: name a new folder", file=sys.stderr)
        return 1
    shutil.copytree(source, dest, dirs_exist_ok=True)
    for path in sorted(p for p in dest.rglob("*") if p.is_file()):
        print(path)
    return 0
