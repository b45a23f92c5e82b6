"""Bodies are bounded before they are read, and Arrow streams before they are decoded."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from stretch.api import create_app
from stretch.api.guard import BodyLimits
from stretch.client import ARROW_STREAM
from tests.api.conftest import TOKEN, TestClient, auth

LIMITS = BodyLimits(
    arrow_batch_bytes=8192, json_batch_bytes=2048, request_bytes=512, decoded_batch_bytes=65536
)
BATCHES = "/v1/operators/f/sources/0/batches"


@pytest.fixture
def small() -> Iterator[TestClient]:
    """An app with small body limits and a forward operator 'f' (v int, s str)."""
    with TestClient(create_app(TOKEN, body_limits=LIMITS)) as http:
        created = http.post(
            "/v1/operators",
            json={"name": "f", "operator": "forward", "params": {"columns": "v:int,s:str"}},
            headers=auth(),
        )
        assert created.status_code == 201, created.text
        yield http


def _arrow(table: pa.Table, compression: str | None = None) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _tuples_in(http: TestClient) -> int:
    return int(http.get("/v1/operators/f", headers=auth()).json()["counters"]["tuples_in"])


def test_a_declared_length_above_the_limit_is_refused_unread() -> None:
    # The default limits: a client announcing 200 MB is answered before it sends them.
    with TestClient(create_app(TOKEN)) as http:
        response = http.post(
            "/v1/operators/f/sources/0/batches",
            content=b"{}",
            headers={**auth(), "Content-Type": "application/json", "Content-Length": "200000000"},
        )
    assert response.status_code == 413, response.text
    assert "larger than 16777216 bytes" in response.json()["detail"]


def test_bodies_above_their_limits_get_413(small: TestClient) -> None:
    rows = [{"ts": i, "v": i, "s": "x" * 20} for i in range(100)]
    response = small.post(BATCHES, json={"rows": rows}, headers=auth())
    assert response.status_code == 413 and "2048 bytes" in response.json()["detail"]

    def chunks() -> Iterator[bytes]:
        for _ in range(64):
            yield b" " * 256  # chunked: no Content-Length, refused once past the limit

    response = small.post(
        BATCHES, content=chunks(), headers={**auth(), "Content-Type": "application/json"}
    )
    assert response.status_code == 413 and "2048 bytes" in response.json()["detail"]
    response = small.post(
        "/v1/operators",
        json={"name": "g", "operator": "forward", "params": {"columns": "v:int" + " " * 600}},
        headers=auth(),
    )
    assert response.status_code == 413 and "512 bytes" in response.json()["detail"]
    assert _tuples_in(small) == 0
    assert [op["name"] for op in small.get("/v1/operators", headers=auth()).json()] == ["f"]
    metrics = small.get("/metrics", headers=auth()).text
    assert 'route="/v1/operators/{name}/sources/{source}/batches",status="413"' in metrics


def test_a_compressed_stream_is_measured_before_it_is_decoded(small: TestClient) -> None:
    bomb = pa.table({"ts": [1] * 2000, "v": [1] * 2000, "s": ["y" * 100] * 2000})
    body = _arrow(bomb, "zstd")
    assert len(body) < LIMITS.arrow_batch_bytes < LIMITS.decoded_batch_bytes < bomb.nbytes
    response = small.post(BATCHES, content=body, headers={**auth(), "Content-Type": ARROW_STREAM})
    assert response.status_code == 413, response.text
    assert "decodes to" in response.json()["detail"]
    assert "65536" in response.json()["detail"]
    fits = _arrow(bomb.slice(0, 100), "lz4")
    response = small.post(BATCHES, content=fits, headers={**auth(), "Content-Type": ARROW_STREAM})
    assert response.status_code == 202, response.text
    assert _tuples_in(small) == 100
