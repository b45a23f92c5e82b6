"""Fixtures for the REST API tests: the real app behind FastAPI's TestClient."""

from __future__ import annotations

import socket
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pyarrow as pa
import pytest
import uvicorn
from fastapi import FastAPI

from stretch.api import create_app
from stretch.client import StretchClient

with warnings.catch_warnings():
    # Starlette asks for httpx2 under its TestClient; httpx works the same for these tests.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKEN = "s3cret-token"
TIMEOUT_S = 60.0


@pytest.fixture
def http() -> Iterator[TestClient]:
    """A TestClient of a fresh app with a token (its lifespan stops every operator)."""
    with TestClient(create_app(TOKEN)) as test_client:
        yield test_client


@pytest.fixture
def client(http: TestClient) -> StretchClient:
    """The typed client over the TestClient, authenticated."""
    return StretchClient(token=TOKEN, http=http)


def auth() -> dict[str, str]:
    """The Authorization header of the test token."""
    return {"Authorization": f"Bearer {TOKEN}"}


def send_in_chunks(client: StretchClient, name: str, tables: list[pa.Table], chunk: int) -> None:
    """Send each source's table in chunks, alternating sources, with batch ids."""
    longest = max(t.num_rows for t in tables)
    for start in range(0, longest, chunk):
        for source, table in enumerate(tables):
            if start < table.num_rows:
                client.add_batch(name, source, table.slice(start, chunk), batch_id=start)
    for source in range(len(tables)):
        client.close_source(name, source)


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serving(app: FastAPI) -> Iterator[str]:
    """Run ``app`` under a real uvicorn on a free loopback port; yield its base URL."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="uvicorn-test")
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(TIMEOUT_S)
        assert not thread.is_alive()


def v_table(ts: np.typing.ArrayLike, first: int = 0) -> pa.Table:
    """A ``forward`` batch with columns ``ts`` and ``v`` (v counts from ``first``)."""
    stamps = np.asarray(ts, dtype=np.int64)
    values = np.arange(first, first + len(stamps), dtype=np.int64)
    return pa.table({"ts": stamps, "v": values})


def union_in_total_order(tables: list[pa.Table]) -> pa.Table:
    """What ``forward`` outputs: every row once, by ``(ts, source)``, arrival order in ties."""
    parts = []
    for source, table in enumerate(tables):
        ordered = table.take(np.argsort(table.column("ts").to_numpy(), kind="stable"))
        parts.append(ordered.append_column("source", pa.array([source] * ordered.num_rows)))
    merged = pa.concat_tables(parts)
    order = np.lexsort((merged.column("source").to_numpy(), merged.column("ts").to_numpy()))
    return merged.take(order).drop_columns(["source"])
