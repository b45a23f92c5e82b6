"""Hostile but plausible input gets a 4xx naming the fault and leaves the state unchanged."""

from __future__ import annotations

import json
import math
from typing import Any

import pyarrow as pa
import pytest

from stretch import build, run_sn
from stretch.api.codec import encode_arrow
from stretch.client import ARROW_STREAM, StretchClient
from tests.api.conftest import TIMEOUT_S, TestClient, auth

BATCHES = "/v1/operators/f/sources/0/batches"
JSON = {"Content-Type": "application/json"}
ARROW = {"Content-Type": ARROW_STREAM}


def _flipped(body: bytes, position: int) -> bytes:
    mutable = bytearray(body)
    mutable[position] ^= 0xFF
    return bytes(mutable)


GOOD = encode_arrow(pa.table({"ts": [10], "v": [1], "w": [1.5], "s": ["a"]}))


@pytest.fixture
def forward(client: StretchClient) -> StretchClient:
    """A forward operator 'f' over (v int, w float, s str), one source, one row in."""
    client.create_operator("f", "forward", {"columns": "v:int,w:float,s:str", "inputs": 1})
    client.add_batch("f", 0, pa.table({"ts": [5], "v": [0], "w": [0.0], "s": ["x"]}))
    return client


@pytest.mark.parametrize(
    ("content", "headers", "status", "words"),
    [
        (_flipped(GOOD, 10), ARROW, 400, "malformed Arrow"),
        (GOOD[:-9], ARROW, 400, "malformed Arrow"),
        (
            encode_arrow(
                pa.table({"ts": [10], "v": pa.array([2**64 - 1], pa.uint64()), "w": [1.0]})
            ),
            ARROW,
            422,
            "18446744073709551615 (uint64) cannot be held exactly as int",
        ),
        (b'{"rows":[{"ts":10,"v":18446744073709551615,"w":1.0,"s":""}]}', JSON, 422, "int64"),
        (b'{"rows":[{"ts":10,"v":1,"w":9007199254740993,"s":""}]}', JSON, 422, "exactly as float"),
        (b'{"rows":' + b"[" * 100_000 + b"]" * 100_000 + b"}", JSON, 400, "nested too deeply"),
        (b'{"rows":[{"ts":10,"v":1,"w":1.0,"s":"\\ud800"}]}', JSON, 400, "unpaired surrogate"),
        (
            encode_arrow(
                pa.Table.from_arrays(
                    [pa.array([10]), pa.array([1]), pa.array([2]), pa.array([1.0])],
                    names=["ts", "v", "v", "w"],
                )
            ),
            ARROW,
            422,
            "column 'v' appears 2 times",
        ),
        (
            b'{"rows":[{"ts":10,"v":1,"w":1e400,"s":""}]}',
            JSON,
            400,
            "row 1, column 'w': 1e400 is beyond the range of a float64",
        ),
        (
            b'{"rows":[{"ts":10,"v":1,"w":1.0,"s":""},{"ts":11,"v":2,"w":NaN,"s":""}]}',
            JSON,
            400,
            "row 2, column 'w': NaN is not a JSON number (send non-finite floats as Arrow)",
        ),
        (
            b'{"rows":[{"ts":10,"v":1,"w":-Infinity,"s":""}]}',
            JSON,
            400,
            "row 1, column 'w': -Infinity is not a JSON number",
        ),
        (b'{"rows":[{"ts":10,"v":1,"w":1.0,"s":"","x":[NaN]}]}', JSON, 400, "NaN is not a JSON"),
        (
            b'{"rows":[{"ts":9223372036854775807,"v":1,"w":1.0,"s":""}]}',
            JSON,
            422,
            "outside the event time range",
        ),
    ],
)
def test_bad_batches_get_4xx_and_change_nothing(
    http: TestClient,
    forward: StretchClient,
    content: bytes,
    headers: dict[str, str],
    status: int,
    words: str,
) -> None:
    before = forward.status("f")
    response = http.post(BATCHES, content=content, headers={**auth(), **headers})
    assert response.status_code == status, response.text
    assert words in response.json()["detail"]
    after = forward.status("f")
    assert after["sources"] == before["sources"]
    forward.add_batch("f", 0, pa.table({"ts": [20], "v": [2], "w": [2.0], "s": ["y"]}))
    forward.close_source("f", 0)
    assert forward.read_all("f", TIMEOUT_S).column("v").to_pylist() == [0, 2]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"name": ".", "operator": "wordcount"}, "name"),
        ({"name": "..", "operator": "wordcount"}, "name"),
        ({"name": "k", "operator": "forward", "params": {"columns": "ts:int"}}, "'ts'"),
        ({"name": "k", "operator": "forward", "params": {"columns": "v:int,v:float"}}, "'v'"),
        ({"name": "k", "operator": "wordcount", "params": {"ws": True}}, "not bool"),
        ({"name": "k", "operator": "wordcount", "params": {"ws": "\ud800"}}, "surrogate"),
    ],
)
def test_bad_operators_are_refused(http: TestClient, body: dict[str, Any], words: str) -> None:
    response = http.post(
        "/v1/operators",
        content=_json_bytes(body),
        headers={**auth(), **JSON},
    )
    assert response.status_code == 422, response.text
    assert words in response.json()["detail"]
    assert http.get("/v1/operators", headers=auth()).json() == []


def _json_bytes(body: dict[str, Any]) -> bytes:
    return json.dumps(body).encode("utf-8", "surrogatepass")


def test_a_watermark_at_int64_max_is_refused(http: TestClient, forward: StretchClient) -> None:
    response = http.post(
        "/v1/operators/f/sources/0/watermark", json={"ts": 2**63 - 1}, headers=auth()
    )
    assert response.status_code == 422, response.text
    assert not forward.status("f")["sources"][0]["closed"]


@pytest.mark.parametrize(
    ("operator", "params", "words"),
    [
        ("scalejoin", {"keys": 10**9}, "1..1024"),
        ("hedge", {"keys": 0}, "1..1024"),
        ("wordcount", {"wa": 1, "ws": 10**6}, "at most 1024"),
        ("wordcount", {"ws": 10**30}, "1..1099511627776"),
        ("longest_tweet", {"wa": 10**30}, "1..1099511627776"),
        ("paircount", {"b": "1" + "0" * 400}, "1..2147483647"),
        ("forward", {"columns": "v:int", "inputs": 10**6}, "1..64"),
        ("forward", {"columns": ",".join(f"c{i}:int" for i in range(300))}, "at most 256"),
    ],
)
def test_parameters_beyond_the_runtime_limits_are_refused(
    http: TestClient, operator: str, params: dict[str, Any], words: str
) -> None:
    body = {"name": "k", "operator": operator, "params": params}
    response = http.post("/v1/operators", json=body, headers=auth())
    assert response.status_code == 422, response.text
    assert words in response.json()["detail"]
    assert http.get("/v1/operators", headers=auth()).json() == []


@pytest.mark.parametrize(
    ("unit", "tz", "values", "expected"),
    [
        ("us", "UTC", [1_500_999, 1_000_000], [1000, 1500]),  # Spark's TimestampType
        ("ns", None, [2_000_000_000, 7_999_999], [7, 2000]),
        ("s", "Europe/Paris", [3, 2], [2000, 3000]),
        ("ms", "UTC", [-5, 4], [-5, 4]),
    ],
)
def test_arrow_timestamps_are_event_time_in_ms(
    http: TestClient,
    client: StretchClient,
    unit: str,
    tz: str | None,
    values: list[int],
    expected: list[int],
) -> None:
    client.create_operator("t", "forward", {"columns": "v:int", "inputs": 1})
    table = pa.table(
        {"ts": pa.array(values, pa.int64()).cast(pa.timestamp(unit, tz=tz)), "v": [1, 2]}
    )
    response = http.post(
        "/v1/operators/t/sources/0/batches",
        content=encode_arrow(table),
        headers={**auth(), **ARROW},
    )
    assert response.status_code == 202, response.text
    client.close_source("t", 0)
    out = client.read_all("t", TIMEOUT_S)
    assert out.schema.field("ts").type == pa.int64()
    assert out.column("ts").to_pylist() == expected


def test_arrow_nan_and_infinity_are_values_given_back_as_sent(
    http: TestClient, client: StretchClient
) -> None:
    """Arrow carries non-finite floats (JSON cannot): taken, ordered and given back as sent."""
    client.create_operator("f", "forward", {"columns": "w:float,v:int", "inputs": 1})
    w = [math.nan, math.inf, -math.inf, 0.5, -0.0]
    table = pa.table({"ts": [3, 1, 2, 3, 3], "v": [0, 1, 2, 3, 4], "w": pa.array(w, pa.float64())})
    response = http.post(
        "/v1/operators/f/sources/0/batches",
        content=encode_arrow(table),
        headers={**auth(), **ARROW},
    )
    assert response.status_code == 202, response.text
    client.close_source("f", 0)
    out = client.read_all("f", TIMEOUT_S, commit=False)
    expected = run_sn(build("forward", {"columns": "w:float,v:int", "inputs": 1}), [table])
    assert out.column("v").to_pylist() == expected.column("v").to_pylist() == [1, 2, 4, 3, 0]
    assert out.column("w").to_numpy().tobytes() == expected.column("w").to_numpy().tobytes()
    rows, _ = client.output_rows("f")
    assert [r["w"] for r in rows] == [None, None, -0.0, 0.5, None]
