"""What the service costs: limits on operators and threads, no CPU while idle (issue 10, 5)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from stretch import generate
from stretch.api import create_app
from stretch.api.limits import ServiceLimits
from stretch.client import ServiceError, StretchClient
from tests.api.conftest import TIMEOUT_S, TOKEN, send_in_chunks, serving, v_table

IDLE_WINDOW_S = 3.0
"""How long the idle server's CPU time is measured."""


def _cpu_s() -> float:
    """CPU time (user + system) of this process so far, from ``/proc``."""
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_operator_and_thread_limits_answer_507() -> None:
    limits = ServiceLimits(max_operators=2, max_pool_threads=14)
    with TestClient(create_app(TOKEN, limits)) as http:
        client = StretchClient(token=TOKEN, http=http)
        forward = {"columns": "v:int"}
        client.create_operator("a", "forward", forward, max_parallelism=4)
        client.create_operator("b", "forward", forward, max_parallelism=4)
        refused = http.post(
            "/v1/operators",
            json={"name": "c", "operator": "forward", "params": forward},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert refused.status_code == 507
        assert "--max-operators 2" in refused.json()["detail"]
        client.delete_operator("b")
        with pytest.raises(ServiceError) as refused_threads:
            client.create_operator("c", "forward", forward, max_parallelism=8)
        assert refused_threads.value.status == 507
        assert "costs 10 threads" in refused_threads.value.detail
        assert "of the service's 14 (--max-pool-threads)" in refused_threads.value.detail
        assert client.create_operator("c", "forward", forward, max_parallelism=6)["name"] == "c"


def test_idle_operators_cost_no_cpu() -> None:
    """A server with idle, finished and never-fed operators uses < 2% of a core."""
    tables = generate.scalejoin(300, 1000.0, 3)
    with serving(create_app(TOKEN)) as url, StretchClient(url, token=TOKEN) as client:
        client.create_operator("never-fed", "forward", {"columns": "v:int"}, max_parallelism=16)
        client.create_operator("idle", "scalejoin", {"ws": 2000}, parallelism=2, max_parallelism=8)
        client.create_operator("done", "scalejoin", {"ws": 2000}, parallelism=2)
        for source, table in enumerate(tables):
            client.add_batch("idle", source, table)
        send_in_chunks(client, "done", tables, 100)
        client.read_all("done", TIMEOUT_S)
        client.create_operator("f", "forward", {"columns": "v:int"})
        client.add_batch("f", 0, v_table(range(100)))
        client.add_batch("f", 1, v_table(range(100)))
        threads_before = threading.active_count()
        start = _cpu_s()
        threading.Event().wait(IDLE_WINDOW_S)  # measuring an interval, not synchronising
        used = _cpu_s() - start
        assert threading.active_count() == threads_before
    assert used < 0.02 * IDLE_WINDOW_S, f"idle server used {used:.3f} s CPU in {IDLE_WINDOW_S} s"
