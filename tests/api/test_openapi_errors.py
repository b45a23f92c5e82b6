"""The OpenAPI document lists the 400 that every route taking a JSON body answers."""

from __future__ import annotations

from stretch.api import create_app
from tests.api.conftest import TOKEN, TestClient


def test_every_route_taking_a_json_body_lists_400() -> None:
    app = create_app(TOKEN)
    with TestClient(app) as http:
        spec = http.get("/openapi.json").json()
    operations = {
        (method.upper(), path): operation
        for path, item in spec["paths"].items()
        for method, operation in item.items()
    }
    with_json = {
        key
        for key, operation in operations.items()
        if "application/json" in operation.get("requestBody", {}).get("content", {})
    }
    assert len(with_json) >= 7  # create, reconfigure, autoscale, watermark, commits, batches
    missing = sorted(f"{m} {p}" for m, p in with_json if "400" not in operations[m, p]["responses"])
    assert missing == []
