"""`python -m tinker_atropos.models ensure NAME`: build an offline model if needed, print its folder."""

from __future__ import annotations

import argparse
import signal
import sys

from . import ensure_model
from .paths import OFFLINE_MODELS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tinker_atropos.models")
    sub = parser.add_subparsers(dest="command", required=True)
    ensure = sub.add_parser("ensure", help="build the model if missing and print its folder")
    ensure.add_argument("name", choices=OFFLINE_MODELS)
    args = parser.parse_args(argv)
    # A stop (the server's, on a cancelled start) unwinds ensure_model, whose finally removes the
    # half-built staging folder; the default SIGTERM left it in the cache for good.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    print(ensure_model(args.name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
