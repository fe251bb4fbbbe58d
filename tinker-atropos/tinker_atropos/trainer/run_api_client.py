"""The trainer's side of atroposlib's run-api: `POST /register` and `GET /batch`."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from tinker_atropos.http_tls import shared_tls

logger = logging.getLogger(__name__)


class RunApiUnavailable(RuntimeError):
    """run-api did not answer in time, or rejected the registration (exit code 4)."""


@dataclass
class Registration:
    """The body of `POST /register` (atroposlib.api.server.Registration)."""

    wandb_group: str
    wandb_project: str
    batch_size: int
    max_token_len: int
    checkpoint_dir: str
    save_checkpoint_interval: int
    starting_step: int
    num_steps: int


class RunApiClient:
    """One run-api, polled with exponential backoff and bounded, periodic wait messages."""

    def __init__(
        self,
        url: str,
        *,
        poll_min_s: float = 0.05,
        poll_max_s: float = 0.5,
        wait_log_every_s: float = 30.0,
        give_up_after_s: float = 120.0,
    ) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(30.0, connect=5.0), trust_env=False, verify=shared_tls()
        )  # loopback: no proxy
        self._poll_min_s = poll_min_s
        self._poll_max_s = poll_max_s
        self._wait_log_every_s = wait_log_every_s
        self._give_up_after_s = give_up_after_s

    async def aclose(self) -> None:
        await self._http.aclose()

    async def register(self, registration: Registration, *, timeout_s: float) -> str:
        """Register the trainer; retries while run-api is not up yet, for at most `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        delay = self._poll_min_s
        last_error = "no answer"
        while True:
            try:
                resp = await self._http.post(f"{self.url}/register", json=asdict(registration))
            except httpx.TransportError as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code != 200:
                    raise RunApiUnavailable(
                        f"run-api at {self.url} rejected the registration (HTTP {resp.status_code}): {resp.text[:300]}"
                    )
                return str(resp.json().get("uuid"))
            if time.monotonic() >= deadline:
                raise RunApiUnavailable(
                    f"run-api at {self.url} did not answer within {timeout_s:.0f}s ({last_error}); "
                    "start it with `run-api --host 127.0.0.1 --port <port>` and check tinker.api_url"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, self._poll_max_s)

    async def next_batch(self, stop: asyncio.Event) -> list[dict[str, Any]] | None:
        """The next batch of groups, or None when `stop` is set while waiting."""
        started = time.monotonic()
        last_log = started
        failing_since: float | None = None
        delay = self._poll_min_s
        while not stop.is_set():
            try:
                resp = await self._http.get(f"{self.url}/batch")
                resp.raise_for_status()
                body = resp.json()
                failing_since = None
            except (httpx.TransportError, httpx.HTTPStatusError, ValueError) as exc:
                now = time.monotonic()
                failing_since = failing_since or now
                if now - failing_since > self._give_up_after_s:
                    raise RunApiUnavailable(
                        f"run-api at {self.url} stopped answering /batch for {self._give_up_after_s:.0f}s: {exc}"
                    ) from exc
                body = {}
            if body.get("status") == "error":  # e.g. run-api restarted and forgot the trainer
                raise RunApiUnavailable(f"run-api at {self.url}: {body.get('message')}")
            batch = body.get("batch")
            if batch:
                return batch
            now = time.monotonic()
            if now - last_log >= self._wait_log_every_s:
                last_log = now
                logger.info("waiting for a batch from run-api (%.0fs so far)", now - started)
            try:
                await asyncio.wait_for(stop.wait(), timeout=delay)
            except TimeoutError:
                pass
            delay = min(delay * 2, self._poll_max_s)
        return None
