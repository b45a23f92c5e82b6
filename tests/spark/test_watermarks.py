"""The watermark listener stops quietly once its source is closed (no Spark session).

A job closes a source after its writing query ends, and Spark may deliver that query's
last progress event after the close: the listener's post then meets 409 (the source takes
no more input). That is the end of the source's input, not an error: forwarding stops
without a warning. Other failures still warn.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from stretch.client import StretchClient
from stretch.spark.watermarks import WatermarkForwarder
from tests.spark.conftest import TOKEN

FORWARD = {"columns": "v:int", "inputs": 1}
QUERY = "5f0c0a7e-0000-4000-8000-000000000001"


def progress(watermark: str) -> Any:
    """A ``QueryProgressEvent`` as the listener reads it: the query's id and watermark."""
    return SimpleNamespace(progress=SimpleNamespace(id=QUERY, eventTime={"watermark": watermark}))


def test_a_closed_source_ends_the_forwarding_without_a_warning(
    sidecar: str, client: StretchClient, caplog: pytest.LogCaptureFixture
) -> None:
    client.create_operator("forwarded", "forward", FORWARD)
    forwarder = WatermarkForwarder()
    forwarder.track(QUERY, sidecar, "forwarded", 0, TOKEN)
    with caplog.at_level(logging.DEBUG, logger="stretch.spark.watermarks"):
        forwarder.onQueryProgress(progress("1970-01-01T00:00:01.000Z"))
        assert client.status("forwarded")["watermarks"][0] == 1000
        client.close_source("forwarded", 0)  # the job's end of input, before Spark's event
        forwarder.onQueryProgress(progress("1970-01-01T00:00:02.000Z"))
        forwarder.onQueryProgress(progress("1970-01-01T00:00:03.000Z"))  # no longer posted
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    closed = [r.getMessage() for r in caplog.records if r.name == "stretch.spark.watermarks"]
    assert closed == ["source 0 of 'forwarded' is closed: its watermark is no longer forwarded"]


def test_other_failures_still_warn(sidecar: str, caplog: pytest.LogCaptureFixture) -> None:
    forwarder = WatermarkForwarder()
    forwarder.track(QUERY, sidecar, "no-such-operator", 0, TOKEN)
    with caplog.at_level(logging.WARNING, logger="stretch.spark.watermarks"):
        forwarder.onQueryProgress(progress("1970-01-01T00:00:01.000Z"))
    (record,) = [r for r in caplog.records if r.name == "stretch.spark.watermarks"]
    assert "watermark 1000 for source 0 of 'no-such-operator' not forwarded: HTTP 404" in (
        record.getMessage()
    )
