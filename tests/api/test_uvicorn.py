"""One run against a real uvicorn server on loopback (what ``stretch serve`` starts)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn

from api import create_app
from stretch import build, generate, run_sn
from stretch.client import StretchClient
from tests.api.conftest import TIMEOUT_S, TOKEN, send_in_chunks


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def server_url() -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(TOKEN), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
        )
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


def test_lifecycle_over_real_http(server_url: str) -> None:
    tables = generate.scalejoin(600, 1000.0, 11)
    with StretchClient(server_url, token=TOKEN) as client:
        assert client._http.get("/healthz").json() == {"status": "ok"}
        assert client._http.get("/readyz").status_code == 200
        client.create_operator("j", "scalejoin", {"ws": 2000}, parallelism=2)
        send_in_chunks(client, "j", tables, 200)
        out = client.read_all("j", TIMEOUT_S)
        assert out.equals(run_sn(build("scalejoin", {"ws": 2000}), tables))
        metrics = client._http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
        assert 'stretch_tuples_in_total{operator="j",source="1"} 600.0' in metrics
        assert "stretch_output_latency_seconds_bucket" in metrics
        assert 'stretch_active_instances{operator="j"} 2.0' in metrics
