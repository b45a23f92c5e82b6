"""JSON is read as written (issue 23): no repeated keys, no coerced integers, one offset rule."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from fastapi.testclient import TestClient

from stretch.client import StretchClient
from tests.api.conftest import TIMEOUT_S, auth

FORWARD: dict[str, str | int | float] = {"columns": "v:int", "inputs": 1}
JSON = {"Content-Type": "application/json", **auth()}


@pytest.fixture
def forward(client: StretchClient) -> StretchClient:
    """Operator 'f': forward of one source with an int column ``v``."""
    client.create_operator("f", "forward", FORWARD)
    return client


@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"rows": [{"ts": 100, "ts": 200, "v": 1}]}', "row 1: key 'ts' is given twice"),
        (
            b'{"rows": [{"ts": 1, "v": 1}, {"ts": 2, "v": 2, "v": 3}]}',
            "row 2: key 'v' is given twice",
        ),
        (b'{"rows": [{"ts": 1, "v": 1}], "rows": []}', "the body: key 'rows' is given twice"),
    ],
)
def test_a_row_repeating_a_key_is_refused(
    http: TestClient, forward: StretchClient, body: bytes, words: str
) -> None:
    answer = http.post("/v1/operators/f/sources/0/batches", content=body, headers=JSON)
    assert answer.status_code == 422, answer.text
    assert words in answer.json()["detail"]
    status = forward.status("f")
    assert status["counters"]["tuples_in"] == 0 and status["watermarks"] == [None]


@pytest.mark.parametrize(
    ("path", "body", "key"),
    [
        ("/v1/operators", b'{"name": "a", "name": "b", "operator": "forward"}', "name"),
        (
            "/v1/operators",
            b'{"name": "a", "operator": "forward", "params": {"columns": "v:int",'
            b' "columns": "w:int"}}',
            "columns",
        ),
        ("/v1/operators/f/sources/0/watermark", b'{"ts": 100, "ts": 200}', "ts"),
        ("/v1/operators/f/output/commit", b'{"offset": 0, "offset": 5}', "offset"),
        ("/v1/operators/f/reconfigure", b'{"parallelism": 1, "parallelism": 2}', "parallelism"),
    ],
)
def test_any_json_body_repeating_a_key_is_refused(
    http: TestClient, forward: StretchClient, path: str, body: bytes, key: str
) -> None:
    answer = http.post(path, content=body, headers=JSON)
    assert answer.status_code == 422, answer.text
    assert f"key {key!r} is given twice" in answer.json()["detail"]
    assert [s["name"] for s in http.get("/v1/operators", headers=auth()).json()] == ["f"]
    status = forward.status("f")
    assert status["watermarks"] == [None] and status["epoch"] == 0


CREATE = {"name": "t", "operator": "forward", "params": FORWARD}


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/operators", {**CREATE, "parallelism": True}, "parallelism"),
        ("/v1/operators", {**CREATE, "parallelism": "2"}, "parallelism"),
        ("/v1/operators", {**CREATE, "parallelism": 2.0}, "parallelism"),
        ("/v1/operators", {**CREATE, "max_parallelism": False}, "max_parallelism"),
        ("/v1/operators", {**CREATE, "capacity": "65536"}, "capacity"),
        ("/v1/operators", {**CREATE, "allowed_lateness_ms": True}, "allowed_lateness_ms"),
        ("/v1/operators", {**CREATE, "shard": {"index": False, "count": 2}}, "shard.index"),
        (
            "/v1/operators",
            {**CREATE, "autoscale": {"policy": "threshold", "period_ms": "100"}},
            "autoscale.period_ms",
        ),
        ("/v1/operators/f/sources/0/watermark", {"ts": "100"}, "ts"),
        ("/v1/operators/f/sources/0/watermark", {"ts": True}, "ts"),
        ("/v1/operators/f/output/commit", {"offset": True}, "offset"),
        ("/v1/operators/f/reconfigure", {"parallelism": True}, "parallelism"),
        ("/v1/operators/f/reconfigure", {"mapping": [0, True]}, "mapping.1"),
        ("/v1/operators/f/staged/w/0/commit", {"parts": ["0"]}, "parts.0"),
    ],
)
def test_integers_are_integers(
    http: TestClient, forward: StretchClient, path: str, body: dict[str, Any], field: str
) -> None:
    answer = http.post(path.replace("/f/staged", "/f/sources/0/staged"), json=body, headers=auth())
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith(f"{field}: Input should be a valid integer")
    assert [s["name"] for s in http.get("/v1/operators", headers=auth()).json()] == ["f"]
    assert forward.status("f")["epoch"] == 0


def test_autoscale_thresholds_are_numbers_not_booleans(
    http: TestClient, forward: StretchClient
) -> None:
    answer = http.put(
        "/v1/operators/f/autoscale", json={"policy": "threshold", "upper": True}, headers=auth()
    )
    assert answer.status_code == 422 and answer.json()["detail"].startswith("upper:")


def test_reads_and_commits_past_the_end_follow_one_rule(forward: StretchClient) -> None:
    """Past the end is not an error: a read answers no rows, a commit waits for the rows."""
    table, next_offset = forward.output("f", 7)
    assert table.num_rows == 0 and next_offset == 7
    forward.commit("f", 7)
    status = forward.status("f")["output"]
    assert status["start_offset"] == 0 and status["end_offset"] == 0
    forward.add_batch("f", 0, pa.table({"ts": list(range(10)), "v": list(range(10))}))
    forward.close_source("f", 0)
    forward.wait_finished("f", TIMEOUT_S)
    assert forward.status("f")["output"]["start_offset"] == 7
    table, next_offset = forward.output("f", 7)
    assert table.column("v").to_pylist() == [7, 8, 9] and next_offset == 10
    table, next_offset = forward.output("f", 12)
    assert table.num_rows == 0 and next_offset == 12


CONTROL_ROUTES = [
    ("POST", "/v1/operators"),
    ("POST", "/v1/operators/f/sources/0/watermark"),
    ("POST", "/v1/operators/f/output/commit"),
    ("POST", "/v1/operators/f/reconfigure"),
    ("POST", "/v1/operators/f/sources/0/staged/w/0/commit"),
    ("PUT", "/v1/operators/f/autoscale"),
]


@pytest.mark.parametrize(("method", "path"), CONTROL_ROUTES)
@pytest.mark.parametrize(
    ("body", "words"),
    [
        (b'{"name":"a","operator":', "the body is not valid JSON: Expecting value at position 23"),
        (
            b"{'ts': 1}",
            "the body is not valid JSON: Expecting property name enclosed in double quotes at "
            "position 1",
        ),
        (b"", "the body is empty; send a JSON object"),
    ],
)
def test_a_control_body_that_is_not_json_gets_400(
    http: TestClient, forward: StretchClient, method: str, path: str, body: bytes, words: str
) -> None:
    answer = http.request(method, path, content=body, headers=JSON)
    assert answer.status_code == 400, answer.text
    assert answer.json()["detail"] == f"{method} {path}: {words}"
    assert [s["name"] for s in http.get("/v1/operators", headers=auth()).json()] == ["f"]
    status = forward.status("f")
    assert status["watermarks"] == [None] and status["epoch"] == 0
    assert status["output"]["start_offset"] == 0


ROW = b'{"rows": [{"ts": 1, "v": 1}]}'


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("batchid=8", "query.batchid: unknown query parameter; this route takes batch_id"),
        ("batch_id=6&batch_id=7", "query.batch_id: given more than once"),
        ("batch_id=6&batch_id=6", "query.batch_id: given more than once"),
        ("batch_id=6&wait_ms=1", "query.wait_ms: unknown query parameter"),
    ],
)
def test_a_batch_with_an_unknown_or_repeated_query_parameter_is_refused(
    http: TestClient, forward: StretchClient, query: str, words: str
) -> None:
    answer = http.post(f"/v1/operators/f/sources/0/batches?{query}", content=ROW, headers=JSON)
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith(words)
    source = forward.status("f")["sources"][0]
    assert source["tuples_in"] == 0 and source["batches"] == 0
    assert forward.add_batch("f", 0, pa.table({"ts": [1], "v": [1]})) == (1, False)


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("output?ofset=3", "query.ofset: unknown query parameter; this route takes offset, "),
        ("output?offset=0&offset=5", "query.offset: given more than once"),
        ("output/cut?ts=1&t=2", "query.t: unknown query parameter; this route takes ts"),
    ],
)
def test_a_read_with_an_unknown_or_repeated_query_parameter_is_refused(
    http: TestClient, forward: StretchClient, path: str, words: str
) -> None:
    answer = http.get(f"/v1/operators/f/{path}", headers=auth())
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith(words)


def test_an_output_commit_takes_no_query_parameter(
    http: TestClient, forward: StretchClient
) -> None:
    answer = http.post("/v1/operators/f/output/commit?offset=5", json={"offset": 0}, headers=auth())
    assert answer.status_code == 422 and "query.offset" in answer.json()["detail"], answer.text


def test_an_unknown_query_parameter_without_the_token_is_still_401(
    http: TestClient, forward: StretchClient
) -> None:
    answer = http.post(
        "/v1/operators/f/sources/0/batches?batchid=8",
        content=ROW,
        headers={"Content-Type": "application/json"},
    )
    assert answer.status_code == 401, answer.text
