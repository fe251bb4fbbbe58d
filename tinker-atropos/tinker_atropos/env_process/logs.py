"""How an environment process logs (logs/env.log, rl_test_inference's process.log): stdlib only.

Timestamps at INFO on stderr, without the lines atroposlib's env loop writes at every turn (ten
times a second) and the HTTP clients' line per request. atroposlib's "Successfully processed
group k/n" stays: rl_test_inference reads its progress from it.
"""

from __future__ import annotations

import logging
import sys

PER_TURN_LINES = ("env_manager: Status dict", "max_num_workers:")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
PER_REQUEST = ("httpx", "httpx2", "httpcore", "httpcore2", "uvicorn.access")  # a line per HTTP request


def _not_per_turn(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(PER_TURN_LINES)


def quiet_http_lines() -> None:
    """The HTTP clients' and servers' line per request (openai's client logs through httpx2) at WARNING."""
    for name in PER_REQUEST:
        logging.getLogger(name).setLevel(logging.WARNING)


def configure() -> None:
    """Idempotent: the launcher calls it, and RunEnv.cli again for a file started by hand."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format=FORMAT)
    quiet_http_lines()
    atropos = logging.getLogger("atroposlib.envs.base")  # its import sets DEBUG: a line per rollout
    atropos.setLevel(logging.INFO)
    if _not_per_turn not in atropos.filters:
        atropos.addFilter(_not_per_turn)
