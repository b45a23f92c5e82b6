"""Clients share one TLS context: httpx would load the CA bundle for each (about 50 ms of CPU).

The Spark reader makes a client for each offset check, commit and read task, and ``stretch
pipeline`` probes its sidecars' readiness with new ones: each paid that load, plain http too.
"""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from stretch.client import StretchClient, tls_context


def test_clients_made_after_the_first_load_no_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tls_context()
    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(context: ssl.SSLContext, *args: Any, **kwargs: Any) -> None:
        loads.append(args or kwargs)
        load(context, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    for url in ("http://127.0.0.1:1", "https://127.0.0.1:1"):
        StretchClient(url).close()
    assert loads == []
    assert tls_context() is shared
    assert shared.verify_mode == ssl.CERT_REQUIRED and shared.check_hostname
