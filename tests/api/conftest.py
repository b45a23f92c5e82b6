"""Fixtures for the REST API tests: the real app behind FastAPI's TestClient."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pyarrow as pa
import pytest

from api import create_app
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
