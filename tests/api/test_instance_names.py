"""Every error names the operator instance, not its catalog type (issue 23).

A service may run several instances of one catalog operator: ``source 0 of 'scalejoin'``
does not say which. Each case here is answered by the runtime, below the REST layer.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pyarrow as pa
import pytest

from stretch import generate, run_sn
from stretch.client import StretchClient
from tests import custom_operators
from tests.api.conftest import TIMEOUT_S, TestClient, auth

NAME = "bi-sj"
ROUTE = f"/v1/operators/{NAME}"


@pytest.fixture
def join(client: StretchClient) -> list[pa.Table]:
    """A scalejoin named 'bi-sj' with the first half of its input added, source 1 closed."""
    tables = generate.scalejoin(200, 100.0, 5)
    client.create_operator(NAME, "scalejoin", {"ws": 2000}, parallelism=2, max_parallelism=4)
    for source, table in enumerate(tables):
        client.add_batch(NAME, source, table.slice(0, 100), batch_id=0)
    client.close_source(NAME, 1)
    return tables


@pytest.mark.parametrize(
    ("path", "body", "status", "words"),
    [
        (
            "/sources/0/batches?batch_id=7",
            {"rows": [{"ts": 1, "x": 1, "y": 1.0}]},
            422,
            "source 0 of 'bi-sj': row 1 has ts 1, before the released watermark",
        ),
        ("/sources/1/batches?batch_id=8", {"rows": [{"ts": 10**9, "a": 1}]}, 4, "'bi-sj'"),
        ("/reconfigure", {"parallelism": 9}, 422, "operator 'bi-sj': parallelism 9 (epoch 1)"),
        ("/reconfigure", {"mapping": [0, 1]}, 422, "operator 'bi-sj': mapping has 2 entries"),
        ("/reconfigure", {"mapping": [5] * 1024}, 422, "operator 'bi-sj': mapping sends"),
    ],
)
def test_errors_name_the_instance(
    http: TestClient,
    client: StretchClient,
    join: list[pa.Table],
    path: str,
    body: dict[str, Any],
    status: int,
    words: str,
) -> None:
    response = http.post(ROUTE + path, json=body, headers=auth())
    assert str(response.status_code).startswith(str(status)), response.text
    detail = response.json()["detail"]
    assert words in detail, detail
    assert "'scalejoin'" not in detail, detail
    assert client.status(NAME)["epoch"] == 0


def test_a_registered_operator_takes_ws_over_rest(client: StretchClient) -> None:
    """README: every operator takes wa and ws, registered ones too (issue 23)."""
    assert custom_operators.sensor_mean({}).ws_ms == 200
    client.create_operator("m", "sensor_mean", {"ws": 400, "wa": 100})
    readings = custom_operators.READINGS.table(
        [0, 150, 300, 450, 600], [("s1", 1.0), ("s1", 2.0), ("s1", 3.0), ("s1", 4.0), ("s1", 5.0)]
    )
    client.add_batch("m", 0, readings, batch_id=0)
    client.close_source("m", 0)
    out = client.read_all("m", TIMEOUT_S)
    expected = custom_operators.sensor_mean({})
    assert out.equals(run_sn(replace(expected, wa_ms=100, ws_ms=400), [readings]))
    assert not out.equals(run_sn(expected, [readings]))  # the window did change
    response = client.status("m")
    assert response["params"] == {"ws": 400, "wa": 100}
