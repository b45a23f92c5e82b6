"""Property: requests generated from the app's own OpenAPI schema never get a 5xx.

A small generator reads ``/openapi.json``: for each operation it draws path parameters
(known names and sources mixed with arbitrary ones), query parameters and a JSON body
from the operation's schema (or arbitrary JSON, or arbitrary bytes as an Arrow body).
Every answer must be below 500, and every 4xx must carry a string ``detail``.
"""

from __future__ import annotations

import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api import create_app
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
            if http.get("/v1/operators/p").status_code == 404:
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
            for status in http.get("/v1/operators").json():
                if status["name"] != "p":
                    http.delete(f"/v1/operators/{status['name']}", headers=auth)

        check()
