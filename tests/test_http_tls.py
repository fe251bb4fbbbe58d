"""The product's httpx clients share one TLS context that verifies as a default client's does."""

from __future__ import annotations

import ssl

from tinker_atropos.http_tls import shared_tls


def test_one_verifying_context_per_process() -> None:
    context = shared_tls()
    assert context is shared_tls()
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] > 0  # a CA bundle is loaded
