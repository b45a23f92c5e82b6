"""Every route refuses a query parameter it does not take, or one given twice (422).

Exempt are the probes (``/healthz``, ``/readyz``, ``/metrics``: orchestrators and
scrapers call them with parameters of their own, e.g. a Prometheus job's ``params``, and
they read none, so no parameter can be mistaken) and the framework's ``/openapi.json``,
``/docs`` and its static ``/docs/assets``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from fastapi import FastAPI

from stretch.api import create_app
from stretch.client import StretchClient
from tests.api.conftest import TOKEN, TestClient, auth

EXEMPT = {"/healthz", "/readyz", "/metrics", "/openapi.json", "/docs", "/docs/assets"}
PATH_VALUES = {"name": "f", "source": "0", "writer": "w", "batch": "0", "part": "0"}


def _routes(app: FastAPI) -> list[tuple[str, str]]:
    """Every (method, path template) the app's OpenAPI document lists, but the exempt ones."""
    return sorted(
        (method.upper(), path)
        for path, item in app.openapi()["paths"].items()
        if path not in EXEMPT
        for method in item
    )


ROUTES = _routes(create_app(TOKEN))


def test_only_the_probes_and_the_framework_routes_are_exempt() -> None:
    assert all(path.startswith("/v1/") for _, path in ROUTES)
    assert len(ROUTES) == 21


@pytest.fixture
def http() -> Iterator[TestClient]:
    """A TestClient of an app holding operator 'f' (forward, one source)."""
    with TestClient(create_app(TOKEN)) as test_client:
        client = StretchClient(token=TOKEN, http=test_client)
        client.create_operator("f", "forward", {"columns": "v:int", "inputs": 1})
        yield test_client


@pytest.mark.parametrize(("method", "template"), ROUTES)
def test_an_unknown_query_parameter_is_refused_naming_it(
    http: TestClient, method: str, template: str
) -> None:
    path = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], template)
    answer = http.request(method, f"{path}?nonsense=1", headers=auth())
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert detail.startswith("query.nonsense: unknown query parameter; this route takes ")
    assert [s["name"] for s in http.get("/v1/operators", headers=auth()).json()] == ["f"]


def test_a_repeated_query_parameter_is_refused() -> None:
    with TestClient(create_app(TOKEN)) as http:
        answer = http.get("/v1/operators/f/output?max_rows=1&max_rows=2", headers=auth())
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith("query.max_rows: given more than once")


def test_a_route_taking_none_says_so() -> None:
    with TestClient(create_app(TOKEN)) as http:
        answer = http.get("/v1/operators?limit=5", headers=auth())
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"] == "query.limit: unknown query parameter; this route takes none"
