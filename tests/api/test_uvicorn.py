"""One run against a real uvicorn server on loopback (what ``stretch serve`` starts)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from stretch import build, generate, run_sn
from stretch.api import create_app
from stretch.client import StretchClient
from tests.api.conftest import TIMEOUT_S, TOKEN, send_in_chunks, serving


@pytest.fixture
def server_url() -> Iterator[str]:
    with serving(create_app(TOKEN)) as url:
        yield url


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
        assert 'stretch_string_dictionary_bytes{operator="j"}' in metrics
        # the join's stores hold its window (finished: the status and the gauge agree)
        state = client.status("j")["state_bytes"]
        assert state >= 2 * 600 * 4 * 8  # ts, seq, two 8-byte predicate columns; all live
        assert f'stretch_state_bytes{{operator="j"}} {float(state)}' in metrics
