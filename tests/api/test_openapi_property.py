"""Property: requests generated from the app's own OpenAPI schema never get a 5xx.

A small generator reads ``/openapi.json``: for each operation it draws path parameters
(known names and sources mixed with arbitrary ones), query parameters and a JSON body
from the operation's schema (or arbitrary JSON, or arbitrary bytes as an Arrow body).
Every answer must be below 500, and every 4xx must carry a string ``detail``. A second
property mutates valid Arrow and JSON batches (type swaps, byte flips, truncation): each
answer is below 500, and a refused batch changes nothing.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stretch.api import create_app
from tests.api.conftest import TOKEN, TestClient

JSON_LEAF = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
)
ANY_JSON = st.recursive(
    JSON_LEAF,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
NAMES = st.sampled_from(["p", "nope", "p2"]) | st.from_regex(r"[A-Za-z0-9_.-]{1,8}", fullmatch=True)
OPERATORS = st.sampled_from(["forward", "scalejoin", "wordcount", "hedge", "zzz"])


def _resolve(schema: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = spec["components"]["schemas"][name]
    return schema


def from_schema(
    schema: dict[str, Any], spec: dict[str, Any], depth: int = 0
) -> st.SearchStrategy[Any]:
    """Values mostly valid for ``schema`` (the subset the app's schema uses), some not."""
    schema = _resolve(schema, spec)
    if depth > 3:
        return JSON_LEAF
    if "anyOf" in schema:
        return st.one_of([from_schema(s, spec, depth + 1) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "integer":
        low, high = schema.get("minimum"), schema.get("maximum")
        first = int(low) if low is not None else -5
        last = first + 70 if high is None else min(int(high), first + 70)
        near = st.integers(min_value=first, max_value=last)
        return near | st.integers()
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "string":
        return st.text(max_size=12)
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), spec, depth + 1), max_size=4)
    if kind == "object":
        props = schema.get("properties", {})
        strategies = {
            k: (
                NAMES
                if k == "name"
                else OPERATORS
                if k == "operator"
                else from_schema(v, spec, depth + 1)
            )
            for k, v in props.items()
        }
        required = [k for k in schema.get("required", []) if k in strategies]
        optional = [k for k in strategies if k not in required]
        return st.fixed_dictionaries(
            {k: strategies[k] for k in required}, optional={k: strategies[k] for k in optional}
        )
    return ANY_JSON


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method.upper(), path, op)
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if method in {"get", "post", "put", "delete"}
    ]


def request_strategy(spec: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    choices = []
    for method, path, op in operations(spec):
        params = {}
        query = {}
        for parameter in op.get("parameters", []):
            value = (
                NAMES
                if parameter["name"] in ("name", "writer")
                else from_schema(parameter.get("schema", {}), spec)
            )
            (params if parameter["in"] == "path" else query)[parameter["name"]] = value
        content = op.get("requestBody", {}).get("content", {})
        bodies: list[st.SearchStrategy[Any]] = [st.none(), ANY_JSON.map(lambda v: ("json", v))]
        if "application/json" in content:
            bodies.append(
                from_schema(content["application/json"]["schema"], spec).map(lambda v: ("json", v))
            )
        if "application/vnd.apache.arrow.stream" in content:
            bodies.append(st.binary(max_size=64).map(lambda v: ("arrow", v)))
        choices.append(
            st.fixed_dictionaries(
                {
                    "method": st.just(method),
                    "path": st.just(path),
                    "params": st.fixed_dictionaries(params),
                    "query": st.fixed_dictionaries({}, optional=query),
                    "body": st.one_of(bodies),
                    "auth": st.booleans() | st.just(True),
                }
            )
        )
    return st.one_of(choices)


def _send(http: TestClient, request: dict[str, Any]) -> Any:
    path = re.sub(r"\{(\w+)\}", lambda m: str(request["params"][m.group(1)]), request["path"])
    headers = {"Authorization": f"Bearer {TOKEN}"} if request["auth"] else {}
    kwargs: dict[str, Any] = {}
    if request["body"] is not None:
        kind, value = request["body"]
        if kind == "json":
            kwargs["json"] = value
        else:
            kwargs["content"] = value
            headers["Content-Type"] = "application/vnd.apache.arrow.stream"
    query = {k: v for k, v in request["query"].items() if v is not None}
    return http.request(request["method"], path, params=query, headers=headers, **kwargs)


def test_no_request_from_the_schema_gets_a_5xx() -> None:
    with TestClient(create_app(TOKEN)) as http:
        spec = http.get("/openapi.json").json()
        assert {
            "/v1/operators",
            "/v1/operators/{name}/sources/{source}/batches",
            "/v1/operators/{name}/output",
        } <= set(spec["paths"])
        auth = {"Authorization": f"Bearer {TOKEN}"}

        @settings(
            max_examples=150,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        )
        @given(request_strategy(spec))
        def check(request: dict[str, Any]) -> None:
            if http.get("/v1/operators/p", headers=auth).status_code == 404:
                http.post(
                    "/v1/operators",
                    headers=auth,
                    json={
                        "name": "p",
                        "operator": "forward",
                        "params": {"columns": "v:int", "inputs": 1},
                    },
                )
            if request["query"].get("wait_ms"):
                request["query"]["wait_ms"] = min(int(request["query"]["wait_ms"]), 20)
            response = _send(http, request)
            assert response.status_code < 500, (request, response.text)
            if response.status_code >= 400:
                assert isinstance(response.json()["detail"], str), response.text
            for status in http.get("/v1/operators", headers=auth).json():
                if status["name"] != "p":
                    http.delete(f"/v1/operators/{status['name']}", headers=auth)

        check()


MUTATED_COLUMNS = {"ts": pa.int64(), "v": pa.int64(), "w": pa.float64(), "s": pa.string()}
SWAP_TYPES = [
    pa.uint64(),
    pa.int8(),
    pa.float64(),
    pa.float32(),
    pa.string(),
    pa.bool_(),
    pa.timestamp("us", tz="UTC"),
    pa.null(),
]
ROWS = st.lists(
    st.fixed_dictionaries(
        {
            "ts": st.integers(0, 10**6),
            "v": st.integers(-(2**63), 2**63 - 1),
            "w": st.floats(allow_nan=False, allow_infinity=False),
            "s": st.text(max_size=6),
        }
    ),
    min_size=1,
    max_size=5,
)
JSON_SWAPS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.text(max_size=4)
    | st.just("\ud800")
    | st.lists(st.integers(), max_size=2)
    | st.floats()
)


def _arrow_body(rows: list[dict[str, Any]], swap: tuple[str, pa.DataType] | None) -> bytes:
    table = pa.Table.from_pylist(rows, schema=pa.schema(list(MUTATED_COLUMNS.items())))
    if swap is not None:
        name, kind = swap
        index = table.schema.get_field_index(name)
        try:
            column = table.column(name).cast(kind, safe=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            column = pa.nulls(table.num_rows, kind)
        table = table.set_column(index, pa.field(name, kind), column)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


@st.composite
def mutated_bodies(draw: st.DrawFn) -> tuple[str, bytes]:
    """A valid Arrow or JSON batch, then type swaps, byte flips or a truncation."""
    rows = draw(ROWS)
    kind = draw(st.sampled_from(["arrow", "json"]))
    if kind == "arrow":
        swap = draw(
            st.none()
            | st.tuples(st.sampled_from(list(MUTATED_COLUMNS)), st.sampled_from(SWAP_TYPES))
        )
        body = _arrow_body(rows, swap)
        if draw(st.booleans()):
            body = body + body  # two streams back to back, or a duplicated schema
    else:
        for row in rows:
            if draw(st.booleans()):
                row[draw(st.sampled_from(list(MUTATED_COLUMNS)))] = draw(JSON_SWAPS)
        body = json.dumps({"rows": rows}, allow_nan=True).encode("utf-8", "surrogatepass")
    flips = draw(
        st.lists(st.tuples(st.integers(0, len(body) - 1), st.integers(1, 255)), max_size=3)
    )
    mutable = bytearray(body)
    for position, mask in flips:
        mutable[position] ^= mask
    cut = draw(st.none() | st.integers(0, len(mutable)))
    return kind, bytes(mutable[:cut] if cut is not None else mutable)


def test_mutated_batches_get_a_4xx_and_change_nothing() -> None:
    with TestClient(create_app(TOKEN)) as http:
        auth = {"Authorization": f"Bearer {TOKEN}"}
        created = http.post(
            "/v1/operators",
            headers=auth,
            json={
                "name": "m",
                "operator": "forward",
                "params": {"columns": "v:int,w:float,s:str", "inputs": 1},
                "allowed_lateness_ms": 10**7,
            },
        )
        assert created.status_code == 201, created.text
        types = {"arrow": "application/vnd.apache.arrow.stream", "json": "application/json"}

        @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(mutated_bodies())
        def check(body: tuple[str, bytes]) -> None:
            kind, content = body
            before = http.get("/v1/operators/m", headers=auth).json()["sources"][0]
            response = http.post(
                "/v1/operators/m/sources/0/batches",
                headers={**auth, "Content-Type": types[kind]},
                content=content,
            )
            assert response.status_code < 500, (body, response.text)
            after = http.get("/v1/operators/m", headers=auth).json()["sources"][0]
            if response.status_code >= 400:
                assert isinstance(response.json()["detail"], str), response.text
                assert after["tuples_in"] == before["tuples_in"], response.text
            else:
                assert after["tuples_in"] == before["tuples_in"] + response.json()["accepted"]

        check()
