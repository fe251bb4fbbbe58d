"""Run an environment file as `python <file> <args>` would, with atroposlib's progress on stderr.

`python -m rl_mcp.children.env_process <env file> process --config X.yaml ...`

atroposlib logs "Successfully processed group k/n" at INFO but installs no log handler, and its
JSONL writer buffers whole groups; this handler puts those lines in the log that
rl_test_inference watches, so progress arrives when a group is scored, not a group later.
This runs in the child process only: the MCP server never imports environment code.
"""

from __future__ import annotations

import logging
import runpy
import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    if not argv:
        raise SystemExit("usage: python -m rl_mcp.children.env_process <environment file> <command> [flags]")
    env_file = Path(argv[0]).resolve()
    sys.argv = [str(env_file), *argv[1:]]
    sys.path.insert(0, str(env_file.parent))  # what `python <file>` does: sibling imports work
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.INFO)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.WARNING, handlers=[handler])
    logging.getLogger("atroposlib").setLevel(logging.INFO)
    runpy.run_path(str(env_file), run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
