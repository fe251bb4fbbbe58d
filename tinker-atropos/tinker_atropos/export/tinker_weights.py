"""A Tinker run's weights, brought here: the run's training state is exported by Tinker as
external weights (a PEFT adapter) and each file downloaded from its signed URL, through the tinker
SDK. Needs TINKER_API_KEY and the network; without them the error says which, at once (the key)
or within TINKER_CONNECT_TIMEOUT (the service)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import httpx

from tinker_atropos.backends.tinker_backend import _bounded, check_api_key, connect_timeout
from tinker_atropos.http_tls import shared_tls

EXPORT_TTL_S = 3600  # Tinker deletes the temporary export after this, if we could not


def download_tinker_weights(
    state_path: str, dest: Path, base_url: str | None, progress: Callable[[float], None]
) -> Path:
    """The PEFT adapter of training state `state_path` (tinker://...), downloaded into `dest`."""
    import tinker

    key = check_api_key()
    timeout = connect_timeout()
    where = base_url or os.environ.get("TINKER_BASE_URL") or "its default URL"

    def first_contact() -> tinker.RestClient:  # the client's constructor already talks to the service
        client = tinker.RestClient(base_url=base_url, api_key=key)
        client.get_server_capabilities().result(timeout)
        return client

    rest = _bounded(first_contact, timeout, f"reach the service at {where}")
    service = tinker.ServiceClient(base_url=base_url, api_key=key)
    training = service.create_training_client_from_state(state_path).result()
    export = training.save_weights_external("rl-mcp-export", ttl_seconds=EXPORT_TTL_S).result().path
    try:
        urls = rest.get_external_weights_urls(export).result().urls
        dest.mkdir(parents=True, exist_ok=True)
        with httpx.Client(
            timeout=httpx.Timeout(60.0, connect=timeout), follow_redirects=True, verify=shared_tls()
        ) as http:
            for n, (name, url) in enumerate(sorted(urls.items()), start=1):
                target = dest / name
                target.parent.mkdir(parents=True, exist_ok=True)
                with http.stream("GET", url) as resp, target.open("wb") as fh:
                    resp.raise_for_status()
                    for chunk in resp.iter_bytes(1 << 20):
                        fh.write(chunk)
                progress(n / len(urls))
    finally:
        rest.delete_checkpoint_from_tinker_path(export).result()
    return dest
