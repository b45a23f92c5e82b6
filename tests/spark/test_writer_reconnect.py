"""The writer's driver side: its kept client, and what it makes of a commit's answer.

A connection the sidecar dropped is retried once on a new client; a commit above
micro-batch 0 says the writer continues, so that a sidecar lacking its earlier ones refuses.
And the event-time column a micro-batch brings, read as ms in any timestamp unit.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import httpx
import pyarrow as pa
import pytest

from stretch.client import SidecarUnreachableError
from stretch.errors import InputError
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


def _sink(monkeypatch: pytest.MonkeyPatch, commits: list[dict[str, Any]]) -> Any:
    """A driver-side writer whose client records each commit's arguments."""

    def commit_staged(*args: Any, **kwargs: Any) -> dict[str, Any]:
        commits.append({"batch": args[3], "parts": args[4], **kwargs})
        return {"accepted": 1, "dropped": 0, "duplicate": False, "first_of_writer": False}

    options = SimpleNamespace(
        url=URL, token=None, client=lambda: SimpleNamespace(commit_staged=commit_staged),
        operator="j", source=0, late_rows="fail", allowed_lateness_ms=None, retry_ms=1000,
    )  # fmt: skip
    monkeypatch.setattr(writer, "_clients", {})
    sink = writer.StretchStreamWriter(cast(WriterOptions, options))
    return sink


def _part(batch: int, rows: int) -> writer.StagedPart:
    return writer.StagedPart(writer="q-1", batch_id=batch, part=0, rows=rows)


def test_commits_say_the_writer_continues_after_micro_batch_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Above micro-batch 0 the writer continues (the sidecar refuses it if it does not know
    the writer); a micro-batch without rows is committed too, so the sidecar knows it."""
    commits: list[dict[str, Any]] = []
    sink = _sink(monkeypatch, commits)
    sink.commit([_part(0, 0)], 0)
    sink.commit([_part(1, 5)], 1)
    assert [(c["batch"], c["parts"], c["continues"]) for c in commits] == [
        (0, [], False),
        (1, [0], True),
    ]
    restarted = _sink(monkeypatch, commits)  # a query restarted from its checkpoint
    restarted.commit([_part(7, 2)], 7)
    assert commits[-1]["continues"] is True


def test_a_writer_whose_first_micro_batches_had_no_task_continues_from_its_first_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a write task nothing tells the writer's id, so that micro-batch is not
    committed, and the next may be the writer's first on the sidecar."""
    commits: list[dict[str, Any]] = []
    sink = _sink(monkeypatch, commits)
    sink.commit([], 0)
    sink.commit([None], 1)
    sink.commit([_part(2, 3)], 2)
    sink.commit([_part(3, 3)], 3)
    assert [(c["batch"], c["continues"]) for c in commits] == [(2, False), (3, True)]


@pytest.mark.parametrize(("unit", "per_ms"), [("s", None), ("ms", 1), ("us", 1000), ("ns", 10**6)])
def test_event_time_reads_any_timestamp_unit_as_ms_floored(unit: str, per_ms: int | None) -> None:
    raw = [-1_500_001, -1, 0, 1, 1_999_999, 2_000_000]
    table = pa.table({"when": pa.array(raw, pa.int64()).cast(pa.timestamp(unit)), "v": raw})
    ts = writer.event_time(table, "when", "rows").column("ts").to_pylist()
    assert ts == [v * 1000 if per_ms is None else v // per_ms for v in raw]


def test_event_time_refuses_seconds_beyond_the_ms_range() -> None:
    table = pa.table({"when": pa.array([2**62], pa.timestamp("s"))})
    with pytest.raises(InputError, match="outside the event time range"):
        writer.event_time(table, "when", "rows")
