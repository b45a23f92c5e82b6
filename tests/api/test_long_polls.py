"""Long-polls: one on a deleted operator is woken at once (404), its place freed, never
re-bound; the client's wait for the end of the output survives a poll offset trimmed away.

These run a real uvicorn on loopback: the waits park on its event loop while other requests
(the delete, a second long-poll) go on. Every request has a client timeout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pyarrow as pa
import pytest

from stretch.api import create_app
from stretch.api.codec import ARROW_STREAM, encode_arrow
from stretch.api.limits import ServiceLimits
from stretch.client import ServiceError, StretchClient
from tests.api.conftest import TIMEOUT_S, TOKEN, auth, serving

WAIT_MS = 20_000
"""The long-poll's wait: far longer than a woken read may take to answer."""
WOKEN_WITHIN_S = 5.0
ONE_SOURCE = {"operator": "forward", "params": {"columns": "v:int", "inputs": 1}}


def _wait_until(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not check():
        assert time.monotonic() < deadline, "the condition never held"
        threading.Event().wait(0.01)


def test_a_delete_wakes_its_long_poll_which_answers_404_and_frees_its_place() -> None:
    """The old read answers 404 at once, even once a new ``lp`` has the row v=999."""
    app = create_app(TOKEN, ServiceLimits(max_long_polls=1))
    polls = app.state.long_polls
    with (
        serving(app) as url,
        httpx.Client(base_url=url, timeout=WAIT_MS / 1000 + TIMEOUT_S, headers=auth()) as http,
    ):
        for name in ("lp", "x"):
            assert http.post("/v1/operators", json={"name": name, **ONE_SOURCE}).status_code == 201
        answers: list[httpx.Response] = []
        answered = threading.Event()

        def long_poll() -> None:
            answers.append(http.get("/v1/operators/lp/output", params={"wait_ms": WAIT_MS}))
            answered.set()

        reader = threading.Thread(target=long_poll, name="test-long-poll", daemon=True)
        reader.start()
        _wait_until(lambda: polls.waiting == 1)
        deleted_s = time.monotonic()
        assert http.delete("/v1/operators/lp").status_code == 204
        # A new operator of the same name gets a row: the old read must not answer it.
        assert http.post("/v1/operators", json={"name": "lp", **ONE_SOURCE}).status_code == 201
        row = encode_arrow(pa.table({"ts": [1], "v": [999]}))
        added = http.post(
            "/v1/operators/lp/sources/0/batches",
            content=row,
            headers={"Content-Type": ARROW_STREAM},
        )
        assert added.status_code == 202, added.text
        assert http.post("/v1/operators/lp/sources/0/close").status_code == 202
        assert answered.wait(WOKEN_WITHIN_S), "the deleted operator's long-poll was not woken"
        assert time.monotonic() - deleted_s < WOKEN_WITHIN_S
        reader.join(TIMEOUT_S)
        (answer,) = answers
        assert answer.status_code == 404, answer.text
        assert "'lp' was deleted while this read waited" in answer.json()["detail"]
        assert polls.waiting == 0
        other = http.get("/v1/operators/x/output", params={"wait_ms": 50})
        assert other.status_code == 200, other.text
        fresh = http.get("/v1/operators/lp/output", params={"wait_ms": 1000})
        assert fresh.status_code == 200 and [r["v"] for r in fresh.json()["rows"]] == [999]


def test_a_long_poll_of_an_operator_deleted_without_a_successor_answers_404_at_once() -> None:
    app = create_app(TOKEN)
    with (
        serving(app) as url,
        httpx.Client(base_url=url, timeout=WAIT_MS / 1000 + TIMEOUT_S, headers=auth()) as http,
    ):
        assert http.post("/v1/operators", json={"name": "lp", **ONE_SOURCE}).status_code == 201
        answers: list[httpx.Response] = []
        reader = threading.Thread(
            target=lambda: answers.append(
                http.get("/v1/operators/lp/output", params={"wait_ms": WAIT_MS})
            ),
            name="test-long-poll",
            daemon=True,
        )
        reader.start()
        _wait_until(lambda: app.state.long_polls.waiting == 1)
        assert http.delete("/v1/operators/lp").status_code == 204
        reader.join(WOKEN_WITHIN_S)
        assert not reader.is_alive(), "the deleted operator's long-poll was not woken"
        assert [a.status_code for a in answers] == [404]
        assert app.state.long_polls.waiting == 0


def test_wait_finished_reads_the_status_again_when_its_poll_offset_was_trimmed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another client committed past the offset the status gave: 400, then read again."""
    client = StretchClient("http://127.0.0.1:9", token=TOKEN)
    output = {"finished": False, "end_offset": 9, "committed_offset": 0}
    polls: list[int] = []

    def status(name: str) -> dict[str, Any]:
        return {"output": dict(output)}

    def poll(name: str, offset: int, **kwargs: Any) -> None:
        polls.append(offset)
        output.update(finished=True, committed_offset=15, end_offset=15)
        raise ServiceError(400, "output offset 9 was trimmed; the log starts at 15")

    monkeypatch.setattr(client, "status", status)
    monkeypatch.setattr(client, "output", poll)
    assert client.wait_finished("j", TIMEOUT_S)["output"]["finished"]
    assert polls == [9]

    def gone(name: str, offset: int, **kwargs: Any) -> None:
        raise ServiceError(404, "no operator 'j'")

    output.update(finished=False)
    monkeypatch.setattr(client, "output", gone)
    with pytest.raises(ServiceError, match="404"):
        client.wait_finished("j", TIMEOUT_S)
