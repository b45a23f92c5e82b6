"""The writer's driver side: its kept client, and what it makes of a commit's answer.

A connection the sidecar dropped is retried once on a new client; a first commit of the
writer at a micro-batch above 0 warns that the earlier ones are not in the operator.
"""

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


@pytest.mark.parametrize(("batch", "first", "warned"), [(2, True, True), (0, True, False),
                                                         (2, False, False)])  # fmt: skip
def test_a_first_commit_after_micro_batch_0_warns(
    kept: tuple[_Client, _Client, WriterOptions],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    batch: int,
    first: bool,
    warned: bool,
) -> None:
    _, fresh, _ = kept
    answer = {"accepted": 1, "dropped": 0, "duplicate": False, "first_of_writer": first}
    fresh_commit = SimpleNamespace(commit_staged=lambda *args, **kwargs: answer)
    options = SimpleNamespace(
        url=URL, token=None, client=lambda: fresh_commit, operator="j", source=0,
        late_rows="fail", allowed_lateness_ms=None, retry_ms=1000,
    )  # fmt: skip
    monkeypatch.setattr(writer, "_clients", {})
    sink = writer.StretchStreamWriter.__new__(writer.StretchStreamWriter)
    sink.options = cast(WriterOptions, options)
    message = writer.StagedPart(writer="q-1", batch_id=batch, part=0, rows=1)
    with caplog.at_level("WARNING", logger=writer.logger.name):
        sink.commit([message], batch)
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert bool(said) == warned
    if warned:
        assert "micro-batches 0..1 of this query are not in it" in said[0]
