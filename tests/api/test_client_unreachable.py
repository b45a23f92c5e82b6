"""A service that does not answer: the client names its URL and the request."""

from __future__ import annotations

import socket

import httpx
import pytest

from stretch.client import SidecarUnreachableError, StretchClient, ready
from stretch.errors import StretchError


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_refused_connection_names_the_sidecar_and_the_request() -> None:
    port = _closed_port()
    with (
        StretchClient(f"http://127.0.0.1:{port}", timeout_s=5.0) as client,
        pytest.raises(SidecarUnreachableError) as raised,
    ):
        client.status("pairs")
    message = str(raised.value)
    assert message.startswith(
        f"the sidecar at http://127.0.0.1:{port} did not answer GET /v1/operators/pairs: "
        "ConnectError: "
    )
    assert isinstance(raised.value, StretchError)
    assert isinstance(raised.value, httpx.TransportError)  # callers catching those still do
    assert isinstance(raised.value.__cause__, httpx.ConnectError)


def test_a_sidecar_that_does_not_answer_is_not_ready() -> None:
    assert not ready(f"http://127.0.0.1:{_closed_port()}")
