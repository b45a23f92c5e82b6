"""The OpenAPI document declares what each route takes: its body, and the 400 it may get."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import Request
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from stretch.api import create_app
from tests.api.conftest import TOKEN, TestClient

ARROW = "application/vnd.apache.arrow.stream"
MUTATING = {"POST", "PUT", "PATCH", "DELETE"}


def _operations(http: TestClient) -> dict[tuple[str, str], dict[str, Any]]:
    spec = http.get("/openapi.json").json()
    return {
        (method.upper(), path): operation
        for path, item in spec["paths"].items()
        for method, operation in item.items()
    }


def _api_routes(routes: Iterable[BaseRoute]) -> Iterator[APIRoute]:
    """Every API route, into included routers too (FastAPI >= 0.165 keeps them nested)."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        elif (included := getattr(route, "original_router", None)) is not None:
            yield from _api_routes(included.routes)


def test_every_route_taking_a_json_body_lists_400() -> None:
    app = create_app(TOKEN)
    with TestClient(app) as http:
        operations = _operations(http)
    with_json = {
        key
        for key, operation in operations.items()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
    }
    assert len(with_json) >= 7  # create, reconfigure, autoscale, watermark, commits, batches
    missing = sorted(f"{m} {p}" for m, p in with_json if "400" not in operations[m, p]["responses"])
    assert missing == []


def test_every_route_reading_its_own_body_declares_it() -> None:
    """A route that reads the raw request (rows) declares the body FastAPI cannot see."""
    app = create_app(TOKEN)
    with TestClient(app) as http:
        operations = _operations(http)
    raw = {
        (method, route.path)
        for route in _api_routes(app.routes)
        if route.body_field is None
        for method in route.methods & MUTATING
        if Request in typing.get_type_hints(route.endpoint).values()
    }
    assert {
        ("POST", "/v1/operators/{name}/sources/{source}/batches"),
        ("PUT", "/v1/operators/{name}/sources/{source}/staged/{writer}/{batch}/{part}"),
    } <= raw
    undeclared = sorted(f"{m} {p}" for m, p in raw if "requestBody" not in operations[m, p])
    assert undeclared == []


def test_the_routes_taking_rows_declare_arrow_and_json_as_the_guard_admits() -> None:
    """Where the request guard admits an Arrow body, the document declares one, and only there.

    A ``text/plain`` body gets the guard's 415 naming what the route takes, before routing.
    """
    with TestClient(create_app(TOKEN)) as http:
        operations = _operations(http)
        admits_arrow = set()
        for method, path in operations:
            if method not in MUTATING:
                continue
            concrete = re.sub(
                r"\{(\w+)\}", lambda m: "f" if m[1] in ("name", "writer") else "0", path
            )
            response = http.request(
                method, concrete, content=b"x", headers={"Content-Type": "text/plain"}
            )
            assert response.status_code == 415, (method, path)
            if ARROW in response.json()["detail"]:
                admits_arrow.add((method, path))
    declares_arrow = {
        key
        for key, operation in operations.items()
        if ARROW in operation.get("requestBody", {}).get("content", {})
    }
    assert len(admits_arrow) >= 2  # batches, staged parts
    assert declares_arrow == admits_arrow
    batches = operations["POST", "/v1/operators/{name}/sources/{source}/batches"]
    for key in sorted(admits_arrow):
        body = operations[key]["requestBody"]
        assert body == batches["requestBody"], key
        assert body["required"] is True
        assert {"400", "413", "415", "429"} <= set(operations[key]["responses"]), key
