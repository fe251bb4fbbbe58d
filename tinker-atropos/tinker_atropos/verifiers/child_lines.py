"""The JSON-lines side both verifiers children share (stdlib only: each child imports it as a sibling
module, in its own venv; child_client.py, the host's side, reads KEY_VAR from it).

The first line a child writes is `{"ready": true, "train": N, "eval": M}` or `{"error": ...}` before it
exits; then one reply per request line, `{"id", "rollouts"}` or `{"id", "error"}`, in the order they
finish: requests run concurrently.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TextIO

KEY_VAR = "RL_MCP_VERIFIERS_API_KEY"  # the model server's key, set by the host; never on a command line
Group = Callable[[dict[str, Any]], Awaitable[list[dict[str, Any]]]]


def private_stdout() -> TextIO:
    """A stream of the child's own: from here on fd 1 and print() go to stderr, so nothing the
    environment prints can break a line."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


def write(out: TextIO, data: dict[str, Any]) -> None:
    out.write(json.dumps(data) + "\n")
    out.flush()


def load_failed(out: TextIO, exc: Exception) -> NoReturn:
    traceback.print_exc(file=sys.stderr)
    write(out, {"error": f"load_environment failed: {type(exc).__name__}: {exc}"})
    sys.exit(1)


async def _answer(group: Group, req: dict[str, Any], out: TextIO) -> None:
    try:
        reply: dict[str, Any] = {"id": req["id"], "rollouts": await group(req)}
    except Exception as exc:  # the environment's own failure: reported, the child lives on
        traceback.print_exc(file=sys.stderr)
        reply = {"id": req.get("id"), "error": f"{type(exc).__name__}: {exc}"}
    write(out, reply)


async def serve(group: Group, out: TextIO, train: int, eval_: int) -> None:
    """Say ready, then answer each request line with `group` until stdin closes (the host is gone
    or done), and finish the requests under way."""
    write(out, {"ready": True, "train": train, "eval": eval_})
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=1 << 26)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    pending: set[asyncio.Task[None]] = set()
    while line := await reader.readline():
        task = asyncio.create_task(_answer(group, json.loads(line), out))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:
        await asyncio.wait(pending)
