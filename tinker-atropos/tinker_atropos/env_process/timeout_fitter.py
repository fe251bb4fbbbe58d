"""Each request's timeout set from the server's latest measured decode step, in the environment
process (`tinker_atropos.request_timeouts` says how; `model_requests.py` calls `before_request` for every try).

Each server's `/health` is read at most every HEALTH_EVERY_S; requests that start together (an
evaluation's items) wait for the one read in flight, rather than take the environment's own timeout
meanwhile. The last step it measured stays in use while a new sampler (after each training step)
starts its clock empty. Servers are told apart by URL: the supervised stage's teacher (a cloud
endpoint, or an adapter served on a port of its own) is not timed by the run's server.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tinker_atropos.http_tls import shared_tls
from tinker_atropos.reply_cap import ReplyCap
from tinker_atropos.request_timeouts import SECTION, Decoding, Fit, Policy, fit, workload

logger = logging.getLogger(__name__)

HEALTH_EVERY_S = 2.0


def policy_of(argv: list[str]) -> Policy | None:
    """The policy in the run config an environment process was given (`--config X.yaml`), or None."""
    if "--config" not in argv[:-1]:
        return None
    try:
        data = yaml.safe_load(Path(argv[argv.index("--config") + 1]).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return None  # the environment's own config reader says what is wrong with it
    return Policy.from_section(data.get(SECTION)) if isinstance(data, dict) else None


def _by_rows(decoding: dict[str, Any]) -> dict[int, float]:
    try:
        return {int(r): float(s) for r, s in (decoding.get("step_s_by_rows") or {}).items()}
    except (TypeError, ValueError, AttributeError):
        return {}


def _cap(raw: Any) -> ReplyCap | None:
    if not isinstance(raw, dict) or not isinstance(raw.get("max_reply_tokens"), int):
        return None
    context = raw.get("context")
    return ReplyCap(context if isinstance(context, int) else None, raw["max_reply_tokens"])


class TimeoutFitter:
    """Sets each request's timeout (and its group's) from the server's latest measured decode step."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.env_config: Any = None
        self._floors: dict[int, float] = {}  # each API server's own timeout, by id
        self._health: dict[str, tuple[float, Decoding | None]] = {}  # by /health URL: read at, its latest step
        self._reading: dict[str, asyncio.Lock] = {}  # by /health URL: held while it is read
        self._worker_floor: float | None = None

    def attach(self, env: Any) -> None:
        """The environment whose config sizes the work (its group timeout is raised to fit)."""
        self.env_config = getattr(env, "config", None)
        worker = getattr(self.env_config, "worker_timeout", None)
        self._worker_floor = float(worker) if isinstance(worker, (int, float)) and worker > 0 else None

    async def before_request(self, server: Any, kwargs: dict[str, Any], asked: int | None) -> Fit:
        """Fit `server`'s timeout to this request (and cap what it asks, where nothing fits)."""
        floor = self._floors.setdefault(id(server), float(getattr(server.config, "timeout", 120) or 120))
        result = fit(self.policy, floor, workload(self.env_config, asked), await self._measured(server))
        server.config.timeout = math.ceil(result.timeout_s)
        client = getattr(server, "openai", None)
        if client is not None:
            client.timeout = result.timeout_s  # the openai client reads it at each request
        if result.cut_to is not None:
            for key in ("max_tokens", "max_completion_tokens", "max_new_tokens"):
                if key in kwargs:
                    kwargs[key] = result.cut_to
        if self._worker_floor is not None and self.env_config is not None:
            self.env_config.worker_timeout = max(self._worker_floor, result.group_timeout_s)
        return result

    async def _measured(self, server: Any) -> Decoding | None:
        """The server's decode step, read from its /health at most every HEALTH_EVERY_S (the last one
        measured stays: a new sampler after each step starts its clock empty)."""
        url = str(server.config.base_url).rstrip("/").removesuffix("/v1") + "/health"
        async with self._reading.setdefault(url, asyncio.Lock()):
            now = time.monotonic()
            read_at, measured = self._health.get(url, (-math.inf, None))
            if now - read_at < HEALTH_EVERY_S:
                return measured
            self._health[url] = (now, measured)
            try:
                async with httpx.AsyncClient(timeout=5.0, trust_env=False, verify=shared_tls()) as client:
                    health = (await client.get(url)).json()
                decoding = health.get("decoding") or {}
            except (httpx.HTTPError, ValueError, AttributeError) as exc:
                logger.debug("no decode timing from %s: %s", url, exc)
                return measured
            step, rows = decoding.get("step_s"), decoding.get("mean_rows")
            if isinstance(step, (int, float)) and step > 0 and isinstance(rows, (int, float)):
                measured = Decoding(float(step), float(rows), _cap(health.get("reply_cap")), _by_rows(decoding))
                self._health[url] = (now, measured)
            return measured
