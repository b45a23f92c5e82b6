"""Metrics: an operator's counters continue from their restored values after a restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from stretch.api import create_app
from stretch.client import ServiceError, StretchClient
from tests.api.conftest import TIMEOUT_S, TOKEN, auth, v_table

COUNTERS = (
    "stretch_tuples_in_total",
    "stretch_late_tuples_total",
    "stretch_duplicate_batches_total",
)


def _counters(client: StretchClient) -> dict[tuple[str, str], float]:
    """Operator 'f''s per-source counters, by (metric, source)."""
    return {
        (sample.name, sample.labels.get("source", "")): sample.value
        for family in text_string_to_metric_families(client.metrics())
        for sample in family.samples
        if sample.name in COUNTERS and sample.labels.get("operator") == "f"
    }


def _from_status(client: StretchClient) -> dict[tuple[str, str], float]:
    """The same counters as the operator's status gives them."""
    fields = zip(COUNTERS, ("tuples_in", "late_tuples", "duplicate_batches"), strict=True)
    return {
        (metric, str(source["index"])): source[field]
        for metric, field in fields
        for source in client.status("f")["sources"]
    }


def _ready(http: TestClient) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while http.get("/readyz").status_code != 200:
        assert time.monotonic() < deadline, http.get("/readyz").text
        time.sleep(0.01)


def test_operator_counters_continue_from_their_restored_values(tmp_path: Path) -> None:
    with TestClient(create_app(TOKEN, state_dir=tmp_path)) as http:
        client = StretchClient(token=TOKEN, http=http)
        client.create_operator("f", "forward", {"columns": "v:int"})
        client.add_batch("f", 0, v_table(range(100)), batch_id=1)
        assert client.add_batch("f", 0, v_table(range(100)), batch_id=1).duplicate
        client.add_batch("f", 1, v_table(range(50), 10**6), batch_id=1)
        with pytest.raises(ServiceError, match="late") as late:
            client.add_batch("f", 1, v_table([3, 4]), batch_id=2)  # before ts 49
        assert late.value.status == 422
        before = _counters(client)
        # Refused and repeated batches are not journaled: a checkpoint keeps their counts.
        assert http.post("/v1/operators/f/checkpoint", headers=auth()).status_code == 200
    assert before[("stretch_tuples_in_total", "0")] == 100
    assert before[("stretch_tuples_in_total", "1")] == 50
    assert before[("stretch_duplicate_batches_total", "0")] == 1
    assert before[("stretch_late_tuples_total", "1")] == 2
    with TestClient(create_app(TOKEN, state_dir=tmp_path)) as http:
        _ready(http)
        client = StretchClient(token=TOKEN, http=http)
        assert _counters(client) == before == _from_status(client)
        client.add_batch("f", 1, v_table(range(50, 60), 10**6 + 50), batch_id=3)
        after = _counters(client)
        assert after == _from_status(client)
    assert after[("stretch_tuples_in_total", "1")] == 60
    assert after[("stretch_tuples_in_total", "0")] == 100
