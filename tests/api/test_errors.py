"""Bad requests answer 4xx with a detail naming what was wrong, and change nothing."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from stretch import build, generate, run_sn
from stretch.api import create_app
from stretch.api.codec import encode_arrow
from stretch.client import ARROW_STREAM, StretchClient
from stretch.errors import CapacityError
from tests.api.conftest import TIMEOUT_S, TestClient, auth

SCALEJOIN = {"ws": 2000}


@pytest.fixture
def join(client: StretchClient) -> list[pa.Table]:
    """A scalejoin operator 'j' with the first half of its input already added."""
    tables = generate.scalejoin(200, 100.0, 5)
    client.create_operator("j", "scalejoin", SCALEJOIN, parallelism=2)
    for source, table in enumerate(tables):
        client.add_batch("j", source, table.slice(0, 100), batch_id=0)
    return tables


def _finish(client: StretchClient, tables: list[pa.Table]) -> None:
    """Send the rest, close, and check the output equals the reference (state unchanged)."""
    for source, table in enumerate(tables):
        client.add_batch("j", source, table.slice(100), batch_id=1)
        client.close_source("j", source)
    assert client.read_all("j", TIMEOUT_S).equals(run_sn(build("scalejoin", SCALEJOIN), tables))
    assert client.status("j")["counters"]["tuples_in"] == 400


BATCHES = "/v1/operators/j/sources/{}/batches"


@pytest.mark.parametrize(
    ("source", "kwargs", "status", "words"),
    [
        (0, {"content": b"not arrow", "headers": {"Content-Type": ARROW_STREAM}}, 400, "Arrow"),
        (
            0,
            {"content": b'{"rows": [', "headers": {"Content-Type": "application/json"}},
            400,
            "JSON",
        ),
        (
            0,
            {
                "content": b'{"rows": [{"ts": NaN}]}',
                "headers": {"Content-Type": "application/json"},
            },
            400,
            "NaN",
        ),
        (0, {"json": {"rows": [{"ts": 500, "x": 1}]}}, 422, "'y'"),
        (0, {"json": {"rows": [{}]}}, 422, "column 'ts': missing value"),
        (0, {"json": {"rows": [{"ts": 500, "x": "one", "y": 1.0}]}}, 422, "'x'"),
        (
            0,
            {"json": {"rows": [{"ts": 500, "x": 1, "y": 1.0}, {"ts": 501, "x": "a", "y": 1}]}},
            422,
            "'x'",
        ),
        (
            1,
            {
                "content": encode_arrow(pa.table({"ts": [900], "a": [1.5]})),
                "headers": {"Content-Type": ARROW_STREAM},
            },
            422,
            "'a'",
        ),
        (0, {"json": {"rows": [{"ts": 3, "x": 1, "y": 1.0}]}}, 422, "ts 3"),
        (0, {"json": {"rows": []}, "headers": {"Content-Type": "text/csv"}}, 415, "text/csv"),
        (0, {"json": {"lines": []}}, 400, "rows"),
        (7, {"json": {"rows": []}}, 404, "sources 0..1"),
    ],
)
def test_bad_batches_are_refused_and_change_nothing(
    http: TestClient,
    client: StretchClient,
    join: list[pa.Table],
    source: int,
    kwargs: dict[str, Any],
    status: int,
    words: str,
) -> None:
    before = client.status("j")
    headers = {**auth(), **kwargs.pop("headers", {})}
    response = http.post(BATCHES.format(source), headers=headers, params={"batch_id": 9}, **kwargs)
    assert response.status_code == status, response.text
    assert words in response.json()["detail"]
    after = client.status("j")
    assert after["counters"]["tuples_in"] == before["counters"]["tuples_in"]
    assert after["watermarks"] == before["watermarks"]
    _finish(client, join)


def test_late_tuples_are_counted(
    http: TestClient, client: StretchClient, join: list[pa.Table]
) -> None:
    response = http.post(
        BATCHES.format(0),
        headers=auth(),
        json={"rows": [{"ts": 1, "x": 1, "y": 1.0}, {"ts": 2, "x": 1, "y": 1.0}]},
    )
    assert response.status_code == 422
    assert client.status("j")["sources"][0]["late_tuples"] == 2
    assert (
        'stretch_late_tuples_total{operator="j",source="0"} 2.0'
        in http.get("/metrics", headers=auth()).text
    )
    _finish(client, join)


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "words"),
    [
        ("GET", "/v1/operators/nope", None, 404, "'nope'"),
        ("DELETE", "/v1/operators/nope", None, 404, "'nope'"),
        ("POST", "/v1/operators/nope/reconfigure", {"parallelism": 2}, 404, "'nope'"),
        ("GET", "/v1/operators/nope/output", None, 404, "'nope'"),
        ("POST", "/v1/operators/j/reconfigure", {"parallelism": 9}, 422, "parallelism 9"),
        ("POST", "/v1/operators/j/reconfigure", {"parallelism": 0}, 422, "parallelism"),
        ("POST", "/v1/operators/j/reconfigure", {}, 422, "parallelism, a mapping"),
        ("POST", "/v1/operators/j/reconfigure", {"mapping": [0, 1]}, 422, "mapping"),
        ("POST", "/v1/operators/j/sources/0/watermark", {"ts": "soon"}, 422, "ts"),
        ("POST", "/v1/operators/j/sources/2/watermark", {"ts": 5}, 404, "sources 0..1"),
        ("GET", "/v1/operators/j/output?offset=-1", None, 422, "offset"),
        ("POST", "/v1/operators", {"name": "j", "operator": "scalejoin"}, 409, "'j'"),
        ("POST", "/v1/operators", {"name": "k", "operator": "nosuch"}, 422, "'nosuch'"),
        ("POST", "/v1/operators", {"name": "k", "operator": "forward"}, 422, "columns"),
        (
            "POST",
            "/v1/operators",
            {"name": "k", "operator": "scalejoin", "params": {"zz": 1}},
            422,
            "'zz'",
        ),
        (
            "POST",
            "/v1/operators",
            {"name": "k", "operator": "scalejoin", "parallelism": 3, "max_parallelism": 2},
            422,
            "max_parallelism (2)",
        ),
        (
            "POST",
            "/v1/operators",
            {"name": "k", "operator": "scalejoin", "parallelism": 99},
            422,
            "parallelism",
        ),
    ],
)
def test_bad_requests_answer_4xx_with_detail(
    http: TestClient,
    client: StretchClient,
    join: list[pa.Table],
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    words: str,
) -> None:
    response = http.request(method, path, json=body, headers=auth())
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, str) and words in detail, detail
    assert [op["name"] for op in client.operators()] == ["j"]
    assert client.status("j")["epoch"] == 0
    _finish(client, join)


def test_auth_is_required_on_every_v1_route_and_metrics(
    http: TestClient, client: StretchClient
) -> None:
    create = {"name": "f", "operator": "forward", "params": {"columns": "v:int", "inputs": 1}}
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}):
        response = http.post("/v1/operators", json=create, headers=headers)
        assert response.status_code == 401
        assert response.json() == {"detail": "missing or wrong bearer token"}
        assert response.headers["WWW-Authenticate"] == "Bearer"
    assert http.get("/v1/operators", headers=auth()).json() == []
    assert http.post("/v1/operators", json=create, headers=auth()).status_code == 201
    client.add_batch("f", 0, pa.table({"ts": [1], "v": [7]}))
    client.close_source("f", 0)
    assert client.read_all("f", TIMEOUT_S).column("v").to_pylist() == [7]
    for method, path, body in [
        ("GET", "/v1/operators", None),
        ("GET", "/v1/operators/f", None),
        ("GET", "/v1/operators/f/output", None),
        ("GET", "/v1/operators/f/reconfigurations", None),
        ("GET", "/metrics", None),
        ("POST", "/v1/operators/f/sources/0/batches", {"rows": []}),
        ("POST", "/v1/operators/f/sources/0/watermark", {"ts": 1}),
        ("POST", "/v1/operators/f/sources/0/close", None),
        ("POST", "/v1/operators/f/output/commit", {"offset": 0}),
        ("POST", "/v1/operators/f/reconfigure", {"parallelism": 2}),
        ("DELETE", "/v1/operators/f", None),
    ]:
        response = http.request(method, path, json=body)
        assert response.status_code == 401, path
        assert "7" not in response.text
    for open_path in ("/healthz", "/readyz"):
        assert http.get(open_path).status_code == 200
    assert http.get("/v1/operators/f/output?offset=1", headers=auth()).status_code == 200
    assert http.get("/v1/operators/f", headers=auth()).status_code == 200
    assert "s3cret" not in http.get("/metrics", headers=auth()).text
    spec = http.get("/openapi.json").json()
    assert "HTTPBearer" in spec["components"]["securitySchemes"]
    for path, item in spec["paths"].items():
        for operation in item.values():
            guarded = operation.get("security") == [{"HTTPBearer": []}]
            assert guarded == (path.startswith("/v1/") or path == "/metrics"), path


def test_without_a_token_no_route_asks_for_one() -> None:
    with TestClient(create_app()) as http:
        assert http.get("/v1/operators").status_code == 200
        spec = http.get("/openapi.json").json()
        assert all("security" not in op for item in spec["paths"].values() for op in item.values())


@pytest.mark.parametrize(
    ("method", "path", "content_type"),
    [
        ("POST", "/v1/operators/f/sources/0/close", "application/x-www-form-urlencoded"),
        ("POST", "/v1/operators/f/sources/0/close", "multipart/form-data; boundary=x"),
        ("POST", "/v1/operators/f/sources/0/batches", "text/plain"),
        ("POST", "/v1/operators/f/sources/0/batches", None),
        ("POST", "/v1/operators/f/sources/0/watermark", "text/plain"),
        ("POST", "/v1/operators/f/reconfigure", "application/x-www-form-urlencoded"),
        ("DELETE", "/v1/operators/f", "text/plain"),
    ],
)
def test_mutating_routes_take_only_their_documented_types(
    http: TestClient, client: StretchClient, method: str, path: str, content_type: str | None
) -> None:
    client.create_operator("f", "forward", {"columns": "v:int"})
    headers = {**auth(), **({"Content-Type": content_type} if content_type else {})}
    response = http.request(method, path, content=b'{"ts": 5}', headers=headers)
    assert response.status_code == 415, response.text
    assert "application/json" in response.json()["detail"]
    status = client.status("f")
    assert not any(source["closed"] for source in status["sources"])
    assert status["counters"]["tuples_in"] == 0


def test_full_ingest_buffer_answers_429_and_loses_nothing(
    http: TestClient, client: StretchClient
) -> None:
    left, right = generate.scalejoin(1500, 1000.0, 2)
    client.create_operator("j", "scalejoin", SCALEJOIN, capacity=1024)
    # Source 1 has sent nothing, so source 0's tuples cannot be released: the gate fills
    # up to what flow control lets a source that is ahead hold (half the capacity). A
    # batch is still taken while the source's earlier rows are all in the gate (what does
    # not fit waits in the source); the next one gets 429.
    assert client.add_batch("j", 0, left.slice(0, 500), batch_id=0).accepted == 500
    assert client.add_batch("j", 0, left.slice(500, 100), batch_id=1).accepted == 100
    body = encode_arrow(left.slice(600, 100))
    response = http.post(
        BATCHES.format(0),
        content=body,
        params={"batch_id": 2},
        headers={**auth(), "Content-Type": ARROW_STREAM},
    )
    assert response.status_code == 429
    assert int(response.headers["Retry-After"]) >= 1
    assert "retry later" in response.json()["detail"]
    too_big = http.post(
        BATCHES.format(1),
        content=encode_arrow(right),
        params={"batch_id": 0},
        headers={**auth(), "Content-Type": ARROW_STREAM},
    )
    assert too_big.status_code == 413 and "split it" in too_big.json()["detail"]
    assert "largest batch this operator takes is 1024 rows" in too_big.json()["detail"]
    with pytest.raises(CapacityError, match="still full"):
        client.add_batch("j", 0, left.slice(600, 100), batch_id=2, retry_s=0.0)
    # Once source 1 catches up, the gate drains and the refused batch goes in on retry;
    # then the two sources advance together (neither may run more than half the gate ahead).
    client.add_batch("j", 1, right.slice(0, 500), batch_id=0)
    client.add_batch("j", 0, left.slice(600, 400), batch_id=2)
    client.add_batch("j", 1, right.slice(500, 500), batch_id=500)
    client.add_batch("j", 0, left.slice(1000), batch_id=3)
    client.add_batch("j", 1, right.slice(1000), batch_id=1000)
    client.close_source("j", 0)
    client.close_source("j", 1)
    expected = run_sn(build("scalejoin", SCALEJOIN), [left, right])
    assert client.read_all("j", TIMEOUT_S).equals(expected)
    assert 'status="429"' in http.get("/metrics", headers=auth()).text
