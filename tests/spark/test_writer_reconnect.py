"""The writer's kept client: a connection the sidecar dropped is retried once on a new one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import httpx
import pytest

from stretch.client import SidecarUnreachableError
from stretch.spark import writer
from stretch.spark.options import WriterOptions

URL = "http://127.0.0.1:1"


class _Client:
    closed = False

    def close(self) -> None:
        self.closed = True


def _failing(cause: httpx.TransportError) -> SidecarUnreachableError:
    """What ``StretchClient`` raises for ``cause``."""
    message = f"the sidecar at {URL} did not answer"
    try:
        raise SidecarUnreachableError(message) from cause
    except SidecarUnreachableError as exc:
        return exc


@pytest.fixture
def kept(monkeypatch: pytest.MonkeyPatch) -> tuple[_Client, _Client, WriterOptions]:
    dropped, fresh = _Client(), _Client()
    monkeypatch.setattr(writer, "_clients", {(URL, None): dropped})
    options = cast(WriterOptions, SimpleNamespace(url=URL, token=None, client=lambda: fresh))
    return dropped, fresh, options


def test_a_dropped_connection_is_called_again_on_a_new_client(
    kept: tuple[_Client, _Client, WriterOptions],
) -> None:
    dropped, fresh, options = kept
    calls: list[Any] = []

    def call(client: Any) -> str:
        calls.append(client)
        if client is dropped:
            raise _failing(httpx.ReadError("[Errno 104] Connection reset by peer"))
        return "staged"

    assert writer._with_client(options, call) == "staged"
    assert calls == [dropped, fresh]
    assert dropped.closed


def test_a_sidecar_that_stays_away_fails_on_the_second_try(
    kept: tuple[_Client, _Client, WriterOptions],
) -> None:
    _, fresh, options = kept
    calls: list[Any] = []

    def call(client: Any) -> str:
        calls.append(client)
        raise _failing(httpx.ConnectError("[Errno 111] Connection refused"))

    with pytest.raises(SidecarUnreachableError, match="did not answer"):
        writer._with_client(options, call)
    assert len(calls) == 2 and calls[1] is fresh


def test_a_timeout_is_not_called_again(kept: tuple[_Client, _Client, WriterOptions]) -> None:
    _, _, options = kept
    calls: list[Any] = []

    def call(client: Any) -> str:
        calls.append(client)
        raise _failing(httpx.ReadTimeout("timed out"))

    with pytest.raises(SidecarUnreachableError):
        writer._with_client(options, call)
    assert len(calls) == 1
