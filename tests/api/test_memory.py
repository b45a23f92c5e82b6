"""What an operator costs in memory, measured on a real ``stretch serve`` process (issue 23).

An operator's gates commit memory as they hold nodes, not for their capacity, and a
deleted operator's memory goes back (``api.memory.release_memory``). Measured as the
process's resident set (``VmRSS``); the slack each test allows is stated where it is used.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from stretch.client import tls_context
from tests.api.conftest import TIMEOUT_S, auth
from tests.api.sidecar import Sidecar

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")

MIB = 1 << 20
LARGEST_CAPACITY = 1 << 20
"""The largest ``capacity`` a create takes: its two gates sized for it were 304 MB."""


def _rss_bytes(sidecar: Sidecar) -> int:
    assert sidecar.process is not None
    for line in Path(f"/proc/{sidecar.process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    msg = "no VmRSS"
    raise AssertionError(msg)


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    served = Sidecar(None, tmp_path)
    served.start()
    try:
        yield served
    finally:
        served.stop()


def _call(sidecar: Sidecar, method: str, path: str, **kwargs: Any) -> httpx.Response:
    return httpx.request(
        method,
        f"{sidecar.url}{path}",
        headers=auth(),
        timeout=TIMEOUT_S,
        verify=tls_context(),  # not a CA bundle loaded per request (50 ms of CPU)
        **kwargs,
    )


def _create(sidecar: Sidecar, name: str, operator: str, **fields: object) -> None:
    body = {"name": name, "operator": operator, **fields}
    answer = _call(sidecar, "POST", "/v1/operators", json=body)
    assert answer.status_code == 201, answer.text


def _delete(sidecar: Sidecar, name: str) -> None:
    assert _call(sidecar, "DELETE", f"/v1/operators/{name}").status_code == 204


def test_capacity_costs_no_memory_until_used(sidecar: Sidecar) -> None:
    """Four operators at the largest capacity cost < 32 MB together before any input.

    Each was 304 MB (its gates' arrays, preallocated and written at creation).
    """
    forward = {"params": {"columns": "v:int"}, "capacity": LARGEST_CAPACITY}
    _create(sidecar, "warm-up", "forward", **forward)  # code loaded once per process
    _delete(sidecar, "warm-up")
    before = _rss_bytes(sidecar)
    for i in range(4):
        _create(sidecar, f"big-{i}", "forward", **forward)
    assert _rss_bytes(sidecar) - before < 32 * MIB
    for i in range(4):
        _delete(sidecar, f"big-{i}")


ROUNDS = 10
ROWS_PER_ROUND = 40_000
BATCH_ROWS = 2_000
GROWTH_SLACK = 64 * MIB
"""What ten rounds may add after the first two: glibc keeps fragments of freed memory in
its per-thread arenas (at most 8 per core; trimmed on delete), which levels off after a
few rounds. Before the fix each round kept its operator, about 40 MB a round."""


def _fill_read_delete(sidecar: Sidecar, rng: random.Random) -> int:
    """One round: a wordcount operator fed, read to its end and deleted; its output rows."""
    words = [f"w{i}" for i in range(5_000)]
    _create(sidecar, "wc", "wordcount")
    ts = 0
    for batch in range(ROWS_PER_ROUND // BATCH_ROWS):
        rows = []
        for _ in range(BATCH_ROWS):
            ts += 7
            rows.append({"ts": ts, "user": "u", "tweet": " ".join(rng.choices(words, k=8))})
        deadline = time.monotonic() + TIMEOUT_S
        while (
            answer := _call(
                sidecar,
                "POST",
                "/v1/operators/wc/sources/0/batches",
                json={"rows": rows},
                params={"batch_id": batch},
            )
        ).status_code == 429:
            assert time.monotonic() < deadline, "the operator took no input"
            time.sleep(0.05)
        assert answer.status_code == 202, answer.text
    _call(sidecar, "POST", "/v1/operators/wc/sources/0/close")
    offset = 0
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        page = _call(
            sidecar,
            "GET",
            "/v1/operators/wc/output",
            params={"offset": offset, "wait_ms": 1000, "max_rows": 100_000},
        ).json()
        offset = page["next_offset"]
        _call(sidecar, "POST", "/v1/operators/wc/output/commit", json={"offset": offset})
        output = _call(sidecar, "GET", "/v1/operators/wc").json()["output"]
        if output["finished"] and offset >= output["end_offset"]:
            break
        assert time.monotonic() < deadline, "the output did not end"
    _delete(sidecar, "wc")
    return int(offset)


def test_create_fill_delete_rounds_do_not_grow(sidecar: Sidecar) -> None:
    rng = random.Random(23)
    after: list[int] = []
    for _ in range(ROUNDS):
        assert _fill_read_delete(sidecar, rng) > 0
        after.append(_rss_bytes(sidecar))
    growth = after[-1] - after[1]
    assert growth < GROWTH_SLACK, [round(a / MIB) for a in after]
