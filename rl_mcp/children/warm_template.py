"""A warm template: imports the heavy libraries once, then forks each child from itself.

`python -m rl_mcp.children.warm_template SOCKET OWNER_PID PADDING`

A trainer, environment process, inference server or export spends 2-5 CPU seconds importing torch,
transformers, peft and atroposlib before its first line of work; a forked child has them already
(0.2 s). The server (`rl_mcp/warm_start/`) sends each request over the unix socket `SOCKET`, and
the child becomes what `python ARGV` would have been (`tinker_atropos.warm_fork`); PADDING is room
for the children's command lines in /proc.

The template leaves when OWNER_PID is gone or after `IDLE_S` (10 min) without a request or a live
child. A child outlives it (reparented, as any orphan), as runs outlive the server.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import traceback

from tinker_atropos import warm_fork

# What every heavy child imports before its work (a failed import is skipped: the child imports it
# itself, and fails there as it would have). The product's own modules last: a trainer spent 0.33 CPU s
# importing launch's, an environment 0.24 s its base's, each time; here they cost 0.21 s once.
PRELOAD = (
    "torch", "transformers", "peft", "atroposlib.envs.base", "openai", "wandb", "fastapi", "uvicorn",
    "tinker", "tinker_atropos.trainer.launch", "tinker_atropos.backends.local", "tinker_atropos.environments.common",
    "tinker_atropos.inference_server",
)  # fmt: skip
IDLE_S = 600.0


def main(argv: list[str]) -> None:
    sock_path, owner = argv[0], int(argv[1])
    for name in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    try:
        warm_fork.serve(sock_path, owner, IDLE_S)
    except SystemExit:
        pass  # SIGTERM: its owner stops it
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    # nothing to flush or finalize: an interpreter's teardown of torch and the rest took ~2 s of each
    # stop, past the 2 s an MCP client gives a stdio server to exit before it signals it
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
