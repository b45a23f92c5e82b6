"""Ingest admission: big batches get in, limits answer 413 or 429 (issue 10, 2 and 9)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from stretch import CapacityError, generate
from stretch.api import create_app
from stretch.api.codec import ARROW_STREAM, encode_arrow
from stretch.api.limits import ServiceLimits
from stretch.client import StretchClient
from tests.api.conftest import TIMEOUT_S, TOKEN, auth, union_in_total_order, v_table


def _post(http: TestClient, name: str, source: int, table: pa.Table) -> tuple[int, str]:
    response = http.post(
        f"/v1/operators/{name}/sources/{source}/batches",
        content=encode_arrow(table),
        headers={**auth(), "Content-Type": ARROW_STREAM},
    )
    return response.status_code, response.text


def test_spark_sized_batches_get_in(http: TestClient, client: StretchClient) -> None:
    """Class 2: a 40,000-row batch on a fresh scalejoin is taken, on both sources."""
    client.create_operator("j", "scalejoin", {"ws": 2000})
    left, right = generate.scalejoin(40_000, 100_000.0, 5)
    assert _post(http, "j", 0, left) == (202, '{"accepted":40000,"duplicate":false}')
    assert _post(http, "j", 1, right) == (202, '{"accepted":40000,"duplicate":false}')


def test_batches_larger_than_half_the_gate_get_in_on_both_sources(
    client: StretchClient,
) -> None:
    """Class 2: capacity 1024, 800-row batches on sources with equal or no progress."""
    client.create_operator("f", "forward", {"columns": "v:int"}, capacity=1024)
    tables: list[list[pa.Table]] = [[], []]
    for k in range(4):
        for source in (0, 1):
            batch = v_table(range(k * 800, (k + 1) * 800), source * 10**6 + k * 800)
            client.add_batch("f", source, batch, batch_id=k)  # retries 429 until room
            tables[source].append(batch)
    client.close_source("f", 0)
    client.close_source("f", 1)
    out = client.read_all("f", TIMEOUT_S)
    expected = union_in_total_order([pa.concat_tables(t) for t in tables])
    assert out.equals(expected)


def test_a_batch_that_can_never_fit_gets_413_and_the_client_splits_it(
    http: TestClient, client: StretchClient
) -> None:
    """Class 2: 413 names the largest batch; ``StretchClient.add_batch`` splits by itself."""
    client.create_operator("f", "forward", {"columns": "v:int"}, capacity=1024)
    left, right = v_table(range(0, 5000)), v_table(range(0, 5000, 2), 10**6)
    status, text = _post(http, "f", 0, left)
    assert status == 413 and "largest batch this operator takes is 1024 rows" in text
    results: dict[int, object] = {}

    def send(source: int, table: pa.Table) -> None:  # sources advance together
        results[source] = client.add_batch("f", source, table, batch_id=7)

    threads = [threading.Thread(target=send, args=a) for a in ((0, left), (1, right))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert results == {0: (5000, False), 1: (2500, False)}
    assert client.add_batch("f", 0, left, batch_id=7) == (0, True)
    client.close_source("f", 0)
    client.close_source("f", 1)
    assert client.read_all("f", TIMEOUT_S).equals(union_in_total_order([left, right]))


def _limited(**limits: int) -> TestClient:
    return TestClient(create_app(TOKEN, ServiceLimits(**limits)))


def test_uncommitted_output_pushes_back_until_the_reader_commits() -> None:
    """Class 9: ingest gets 429 while the output log holds too many uncommitted rows."""
    with _limited(max_uncommitted_rows=1000) as http:
        client = StretchClient(token=TOKEN, http=http)
        client.create_operator("f", "forward", {"columns": "v:int"})
        for source in (0, 1):
            client.add_batch("f", source, v_table(range(0, 1200, 2), source * 10**6))
        deadline = time.monotonic() + TIMEOUT_S
        while client.status("f")["output"]["end_offset"] < 1000:  # the drainer appends
            assert time.monotonic() < deadline, "the output did not reach the limit"
            threading.Event().wait(0.01)
        status, text = _post(http, "f", 0, v_table(range(1200, 1300)))
        assert status == 429 and "not committed (limit 1000)" in text
        out, offset = client.output("f", max_rows=100_000)
        client.commit("f", offset)
        assert _post(http, "f", 0, v_table(range(1200, 1300)))[0] == 202
        assert out.num_rows >= 1000


def test_reorder_buffer_is_bounded() -> None:
    """Class 9: rows held for a large lateness are bounded; a watermark releases them."""
    with _limited(max_held_rows=2000) as limited:
        client = StretchClient(token=TOKEN, http=limited)
        created = limited.post(
            "/v1/operators",
            json={
                "name": "f",
                "operator": "forward",
                "params": {"columns": "v:int"},
                "allowed_lateness_ms": 10**9,
            },
            headers=auth(),
        )
        assert created.status_code == 201
        assert _post(limited, "f", 0, v_table(range(1500)))[0] == 202
        status, text = _post(limited, "f", 0, v_table(range(1500, 2500)))
        assert status == 429 and "would hold 2500 rows (limit 2000)" in text
        client.watermark("f", 0, 1500)
        assert _post(limited, "f", 0, v_table(range(1500, 2500)))[0] == 202
        assert client.status("f")["sources"][0]["tuples_in"] == 2500


def test_a_source_far_ahead_of_the_others_stalls_and_the_client_says_why(
    client: StretchClient,
) -> None:
    """One source sent more than half the capacity while the other lags: the client's
    ``CapacityError`` carries the service's reason, and feeding the other source unblocks."""
    client.create_operator("f", "forward", {"columns": "v:int"}, capacity=1024)
    left = v_table(range(2000))
    with pytest.raises(CapacityError, match="for the other sources to catch up") as error:
        client.add_batch("f", 0, left, batch_id=1, retry_s=0.5)
    assert "'f' source 0: still full after 0.5 s" in str(error.value)
    right = v_table(range(0, 2000, 2), 10**6)
    client.add_batch("f", 1, right, batch_id=1)
    assert client.add_batch("f", 0, left, batch_id=1).accepted == 2000 - 1024  # part 1 only
    client.close_source("f", 0)
    client.close_source("f", 1)
    assert client.read_all("f", TIMEOUT_S).equals(union_in_total_order([left, right]))
