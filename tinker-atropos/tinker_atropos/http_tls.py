"""One TLS context per process, for every httpx client the product opens.

httpx builds a context for each client, loading the CA bundle each time: ~30 ms of CPU for a client
that may only ever speak plain HTTP to 127.0.0.1, and status probes, timeout measurements and
run-api clients open many. The shared one verifies as a default client's would (certifi's bundle,
or SSL_CERT_FILE / SSL_CERT_DIR where set).
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def shared_tls() -> ssl.SSLContext:
    return httpx.create_ssl_context()
