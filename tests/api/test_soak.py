"""A bounded soak over real HTTP: everything at once, nothing lost, nothing hangs (issue 10).

Pushers with duplicates and retries, a long-polling reader that commits, a reconfigurer,
and a second operator deleted under its own pusher and poller all race on one uvicorn.
Every answer must be below 500 and arrive within the request deadline, and ``forward``'s
output must equal the union of the accepted inputs in the total order.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pyarrow as pa

from stretch.api import create_app
from stretch.api.codec import ARROW_STREAM, encode_arrow
from tests.api.conftest import TIMEOUT_S, TOKEN, auth, serving, union_in_total_order, v_table

REQUEST_DEADLINE_S = 10.0
BATCHES = 40
ROWS = 300
FORWARD = {"operator": "forward", "params": {"columns": "v:int"}, "capacity": 2048}


class Recorder:
    """An HTTP client that records every answer's status and how long it took."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http
        self.lock = threading.Lock()
        self.answers: list[tuple[str, int, float]] = []

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        started = time.monotonic()
        response = self.http.request(method, path, **kwargs)
        with self.lock:
            self.answers.append((path, response.status_code, time.monotonic() - started))
        return response

    def push(self, name: str, source: int, table: pa.Table, batch_id: int) -> httpx.Response:
        return self.call(
            "POST",
            f"/v1/operators/{name}/sources/{source}/batches",
            content=encode_arrow(table),
            params={"batch_id": batch_id},
            headers={"Content-Type": ARROW_STREAM},
        )


def _start(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, name="soak-client", daemon=True)
    thread.start()
    return thread


def test_soak_no_5xx_no_hang_no_loss() -> None:
    with (
        serving(create_app(TOKEN)) as url,
        httpx.Client(
            base_url=url,
            timeout=REQUEST_DEADLINE_S,
            headers=auth(),
            limits=httpx.Limits(max_connections=32),
        ) as http,
    ):
        client = Recorder(http)
        for name in ("f", "victim"):
            created = client.call(
                "POST",
                "/v1/operators",
                json={**FORWARD, "name": name, "parallelism": 2, "max_parallelism": 4},
            )
            assert created.status_code == 201
        sent: list[list[pa.Table]] = [[], []]
        done = threading.Event()
        stop = threading.Event()

        def pusher(source: int) -> Callable[[], None]:
            def run() -> None:
                rng = random.Random(source)
                ts = 0
                for k in range(BATCHES):
                    stamps = np.sort(
                        ts + np.array([rng.randrange(0, 50) for _ in range(ROWS)], dtype=np.int64)
                    )
                    ts = int(stamps[-1])
                    batch = v_table(stamps, source * 10**6 + k * ROWS)
                    while (response := client.push("f", source, batch, k)).status_code == 429:
                        threading.Event().wait(0.005)  # the client's backoff before a retry
                    assert response.status_code == 202, response.text
                    sent[source].append(batch)
                    if rng.random() < 0.3:  # an at-least-once writer resends
                        again = client.push("f", source, batch, k)
                        assert again.status_code in (202, 429)
                        assert again.status_code == 429 or again.json()["duplicate"]

            return run

        output: list[pa.Table] = []

        def reader() -> None:
            offset = 0
            while True:
                response = client.call(
                    "GET",
                    "/v1/operators/f/output",
                    params={"offset": offset, "wait_ms": 200},
                    headers={"Accept": ARROW_STREAM},
                )
                assert response.status_code == 200, response.text
                table = pa.ipc.open_stream(pa.BufferReader(response.content)).read_all()
                offset = int(response.headers["Stretch-Next-Offset"])
                if table.num_rows:
                    output.append(table)
                    client.call("POST", "/v1/operators/f/output/commit", json={"offset": offset})
                elif done.is_set():
                    status = client.call("GET", "/v1/operators/f").json()["output"]
                    if status["finished"] and offset >= status["end_offset"]:
                        return

        def reconfigurer() -> None:
            rng = random.Random(7)
            while not stop.is_set():
                response = client.call(
                    "POST", "/v1/operators/f/reconfigure", json={"parallelism": rng.randint(1, 4)}
                )
                assert response.status_code in (202, 422, 429), response.text  # 422: closed

        def victim_pusher() -> None:
            k = 0
            while True:
                batch = v_table(range(k * ROWS, (k + 1) * ROWS))
                if client.push("victim", k % 2, batch, k).status_code == 404:
                    return
                k += 1

        def victim_poller() -> None:
            offset = 0
            while True:
                response = client.call(
                    "GET", "/v1/operators/victim/output", params={"offset": offset, "wait_ms": 300}
                )
                if response.status_code == 404:
                    return
                offset = response.json()["next_offset"]

        pushers = [_start(pusher(0)), _start(pusher(1))]
        others = [_start(t) for t in (reader, reconfigurer, victim_pusher, victim_poller)]
        deadline = time.monotonic() + TIMEOUT_S
        while len(sent[0]) + len(sent[1]) < BATCHES:  # halfway: delete the victim
            assert time.monotonic() < deadline, "the pushers made no progress"
            threading.Event().wait(0.01)
        assert client.call("DELETE", "/v1/operators/victim").status_code == 204
        for thread in pushers:
            thread.join(TIMEOUT_S)
            assert not thread.is_alive()
        stop.set()
        for source in (0, 1):
            assert client.call("POST", f"/v1/operators/f/sources/{source}/close").status_code == 202
        done.set()
        for thread in others:
            thread.join(TIMEOUT_S)
            assert not thread.is_alive()
    statuses = {status for _, status, _ in client.answers}
    assert max(statuses) < 500, sorted(statuses)
    assert max(elapsed for _, _, elapsed in client.answers) < REQUEST_DEADLINE_S
    assert len(sent[0]) == len(sent[1]) == BATCHES
    expected = union_in_total_order([pa.concat_tables(tables) for tables in sent])
    assert pa.concat_tables(output).equals(expected)
