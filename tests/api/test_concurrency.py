"""Requests that race: no handler blocks the event loop, nothing hangs (issue 10, 1 and 3).

These run a real uvicorn on loopback where threads or the event loop matter. Every request
has a client timeout, so a hang fails the test instead of stalling it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import httpx
import pyarrow as pa
from fastapi.testclient import TestClient

from stretch.api import create_app
from stretch.api.codec import ARROW_STREAM, encode_arrow
from stretch.api.limits import ServiceLimits
from stretch.client import StretchClient
from tests.api.conftest import (
    TIMEOUT_S,
    TOKEN,
    auth,
    serving,
    union_in_total_order,
    v_table,
)

REQUEST_TIMEOUT_S = 10.0
FORWARD = {"name": "f", "operator": "forward", "params": {"columns": "v:int"}}


def _push(http: httpx.Client, source: int, table: pa.Table, batch_id: int) -> int:
    response = http.post(
        f"/v1/operators/f/sources/{source}/batches",
        content=encode_arrow(table),
        params={"batch_id": batch_id},
        headers={"Content-Type": ARROW_STREAM},
    )
    return response.status_code


def _in_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, name="test-client", daemon=True)
    thread.start()
    return thread


def test_reconfigure_with_a_full_gate_answers_and_the_server_stays_up() -> None:
    """Class 1: reconfigure in a loop while a source is refused; /healthz keeps answering."""
    with (
        serving(create_app(TOKEN)) as url,
        httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S, headers=auth()) as http,
    ):
        created = http.post("/v1/operators", json={**FORWARD, "capacity": 1024})
        assert created.status_code == 201
        right = [v_table([0], 10**6)]
        assert _push(http, 1, right[0], 0) == 202
        left: list[pa.Table] = []
        step = 200
        while True:  # source 0 runs ahead of source 1 until the gate refuses it
            batch = v_table(
                range(1 + len(left) * step, 1 + (len(left) + 1) * step), len(left) * step
            )
            status = _push(http, 0, batch, len(left))
            assert status in (202, 429)
            if status == 429:
                break
            left.append(batch)
            assert len(left) < 50, "the gate never refused source 0"
        stop = threading.Event()
        answers: list[int] = []

        def push_refused() -> None:
            while not stop.is_set():
                batch = v_table(
                    range(1 + len(left) * step, 1 + (len(left) + 1) * step), len(left) * step
                )
                status = _push(http, 0, batch, len(left))
                answers.append(status)
                if status == 202:
                    left.append(batch)

        pusher = _in_thread(push_refused)
        for k in range(150):
            response = http.post("/v1/operators/f/reconfigure", json={"parallelism": 1 + k % 2})
            assert response.status_code in (202, 429), response.text
            assert http.get("/healthz").status_code == 200
        stop.set()
        pusher.join(TIMEOUT_S)
        assert not pusher.is_alive() and set(answers) <= {202, 429}
        with StretchClient(url, token=TOKEN, timeout_s=REQUEST_TIMEOUT_S) as client:
            end = 1 + (len(left) + 1) * step
            right.append(v_table(range(0, end + 10, 3), 2 * 10**6))
            client.add_batch("f", 1, right[1])
            client.close_source("f", 0)
            client.close_source("f", 1)
            out = client.read_all("f", TIMEOUT_S)
        assert out.equals(union_in_total_order([pa.concat_tables(left), pa.concat_tables(right)]))


def test_delete_ends_requests_in_flight() -> None:
    """Class 3: pushes, long-polls and reconfigurations racing a DELETE all end promptly."""
    with (
        serving(create_app(TOKEN)) as url,
        httpx.Client(base_url=url, timeout=REQUEST_TIMEOUT_S, headers=auth()) as http,
    ):
        assert http.post("/v1/operators", json={**FORWARD, "capacity": 1024}).status_code == 201
        answers: dict[str, list[int]] = {"0": [], "1": [], "poll": [], "reconfigure": []}
        progress = threading.Condition()

        def record(kind: str, status: int) -> bool:
            with progress:
                answers[kind].append(status)
                progress.notify_all()
            return status != 404

        def pusher(source: int) -> Callable[[], None]:
            def run() -> None:
                k = 0
                while record(str(source), _push(http, source, v_table(range(k, k + 300)), k)):
                    k += 300

            return run

        def poller() -> None:
            offset = 0
            while True:
                response = http.get(
                    "/v1/operators/f/output", params={"offset": offset, "wait_ms": 500}
                )
                if not record("poll", response.status_code):
                    return
                offset = response.json().get("next_offset", offset)

        def reconfigurer() -> None:
            k = 0
            while record(
                "reconfigure",
                http.post(
                    "/v1/operators/f/reconfigure", json={"parallelism": 1 + k % 2}
                ).status_code,
            ):
                k += 1

        threads = [_in_thread(t) for t in (pusher(0), pusher(1), poller, reconfigurer)]
        with progress:
            assert progress.wait_for(
                lambda: all(len(a) >= 3 for a in answers.values()), TIMEOUT_S
            ), answers
        assert http.delete("/v1/operators/f").status_code == 204
        for thread in threads:
            thread.join(TIMEOUT_S)
            assert not thread.is_alive()
        seen = {status for statuses in answers.values() for status in statuses}
        assert seen <= {200, 202, 404, 409, 429}, answers
        assert all(statuses[-1] == 404 for statuses in answers.values())
        assert http.get("/healthz").status_code == 200


def test_sources_close_one_after_another_with_a_large_lateness(
    http: TestClient, client: StretchClient
) -> None:
    """Class 3: close(0) returns while source 1 still holds its rows back."""
    created = http.post(
        "/v1/operators",
        json={**FORWARD, "capacity": 1024, "allowed_lateness_ms": 10**9},
        headers=auth(),
    )
    assert created.status_code == 201
    left = v_table(range(0, 6000, 2))
    right = v_table(range(1, 3001, 3), 10**6)
    client.add_batch("f", 0, left)
    client.add_batch("f", 1, right.slice(0, 500))
    closing = _in_thread(lambda: client.close_source("f", 0))
    closing.join(TIMEOUT_S)
    assert not closing.is_alive()
    client.add_batch("f", 1, right.slice(500))
    client.close_source("f", 1)
    out = client.read_all("f", TIMEOUT_S)
    assert out.equals(union_in_total_order([left, right]))


def test_long_polls_hold_no_thread_and_are_capped() -> None:
    """Class 6: forty long-polls leave pushes and status fast; the cap answers 429."""
    polls = 40
    app = create_app(TOKEN, ServiceLimits(max_long_polls=polls))
    with (
        serving(app) as url,
        httpx.Client(
            base_url=url,
            timeout=REQUEST_TIMEOUT_S,
            headers=auth(),
            limits=httpx.Limits(max_connections=2 * polls),
        ) as http,
    ):
        assert http.post("/v1/operators", json=FORWARD).status_code == 201
        answers: list[httpx.Response] = []

        def long_poll() -> None:
            answers.append(
                http.get(
                    "/v1/operators/f/output",
                    params={"wait_ms": 60_000},
                    timeout=TIMEOUT_S + 60,
                )
            )

        threads = [_in_thread(long_poll) for _ in range(polls)]
        deadline = time.monotonic() + TIMEOUT_S
        while app.state.long_polls.waiting < polls:  # every poll is parked on the loop
            assert time.monotonic() < deadline, app.state.long_polls.waiting
            threading.Event().wait(0.01)
        refused = http.get("/v1/operators/f/output", params={"wait_ms": 1000})
        assert refused.status_code == 429 and "--max-long-polls 40" in refused.text
        ready = http.get("/readyz")
        assert ready.status_code == 503 and "output reads wait" in ready.text
        assert http.get("/healthz").status_code == 200
        for source in (0, 1):
            assert _push(http, source, v_table(range(10)), 0) == 202
        assert http.get("/v1/operators/f").status_code == 200
        assert http.post("/v1/operators/f/sources/0/close").status_code == 202
        assert http.post("/v1/operators/f/sources/1/close").status_code == 202
        for thread in threads:
            thread.join(TIMEOUT_S)
            assert not thread.is_alive()
        assert [a.status_code for a in answers] == [200] * polls
        assert all(a.json()["rows"] for a in answers)
        assert http.get("/readyz").status_code == 200
