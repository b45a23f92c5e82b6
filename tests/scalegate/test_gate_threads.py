"""Concurrent writers and readers, with readers and sources joining and leaving mid-run.

Every thread runs against a deadline and is joined with a timeout, so a deadlock fails the
test instead of hanging it. Threads poll the gate; between empty polls they only yield.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pytest
from numba import config

from scalegate import DATA, TS_MAX, WATERMARK, ElasticScaleGate

N_PER_SOURCE = 1000 if cast(Any, config).DISABLE_JIT else 4000
DEADLINE_S = 60.0
Node = tuple[int, int, int, int, int]


@dataclass
class Run:
    """Shared bookkeeping of one stress run."""

    gate: ElasticScaleGate
    deadline: float
    written: dict[int, list[Node]] = field(default_factory=dict)
    received: dict[int, list[Node]] = field(default_factory=dict)
    start: dict[int, tuple[int, int]] = field(default_factory=dict)  # reader: (by, index)
    removed: set[int] = field(default_factory=set)
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def spawn(self, target: Callable[..., None], *args: object) -> None:
        def guarded() -> None:
            try:
                target(*args)
            except BaseException as exc:  # reported by the main thread
                with self.lock:
                    self.errors.append(exc)

        thread = threading.Thread(target=guarded, daemon=True)
        with self.lock:
            self.threads.append(thread)
        thread.start()

    def alive(self) -> bool:
        return time.monotonic() < self.deadline


def writer(run: Run, s: int, first_ts: int, seq: int, rng: np.random.Generator) -> None:
    """Write N_PER_SOURCE tuples in random batches; source 0 adds source 3 midway."""
    ts, nodes = first_ts, list[Node]()
    while len(nodes) < N_PER_SOURCE and run.alive():
        n = int(rng.integers(1, 40))
        batch_ts = ts + np.cumsum(rng.integers(0, 3, size=n))
        payload = s * 1_000_000 + len(nodes) + np.arange(n)
        if n == 1:
            run.gate.add_tuple(s, int(batch_ts[0]), int(payload[0]))
        else:
            run.gate.add_batch(s, batch_ts, payload)
        nodes += [
            (int(t), s, seq + i, DATA, int(p))
            for i, (t, p) in enumerate(zip(batch_ts, payload, strict=True))
        ]
        seq, ts = seq + n, int(batch_ts[-1])
        if s == 0 and len(nodes) >= N_PER_SOURCE // 2 and 3 not in run.written:
            run.written[3] = []
            assert run.gate.add_sources([3], by_source=0)
            run.spawn(writer, run, 3, ts, 1, np.random.default_rng(3))  # seq 0: its DUMMY
    if s == 2:
        assert run.gate.remove_sources([2], by_source=2)
    else:
        run.gate.add_watermark(s, TS_MAX)
        nodes.append((TS_MAX, s, seq, WATERMARK, 0))
    run.written[s] = nodes


def reader(run: Run, r: int, rng: np.random.Generator) -> None:
    """Read until every source ended; each reader adds the next, readers 2 and 3 leave."""
    got: list[Node] = []
    run.received[r] = got
    ends, quota = 0, int(rng.integers(N_PER_SOURCE, 3 * N_PER_SOURCE)) if r >= 2 else -1
    while ends < 3 and run.alive():
        if rng.random() < 0.2:
            one = run.gate.get_next_ready_tuple(r)
            new = [] if one is None else [one]
        else:
            b = run.gate.get_ready_batch(r, int(rng.integers(1, 100)))
            cols = (
                b.ts.tolist(),
                b.source.tolist(),
                b.seq.tolist(),
                b.kind.tolist(),
                b.payload.tolist(),
            )
            new = list(zip(*cols, strict=True))
        got += new
        ends += sum(1 for n in new if n[0] == TS_MAX)
        if not new:
            time.sleep(0)  # yield the GIL and the core; not a synchronisation
        if r < 3 and len(got) > N_PER_SOURCE // 2 and (r + 1) not in run.start:
            run.start[r + 1] = (r, len(got))
            assert run.gate.add_readers([r + 1], by_reader=r)
            run.spawn(reader, run, r + 1, np.random.default_rng(r + 1))
        if len(got) == quota:
            assert run.gate.remove_readers([r], by_reader=r)
            run.removed.add(r)
            return


@pytest.mark.parametrize("capacity", [64, 4096])
def test_concurrent_add_get_with_elastic_readers_and_sources(capacity: int) -> None:
    gate = ElasticScaleGate([0, 1, 2], [0], capacity=capacity, max_sources=4, max_readers=4)
    run = Run(gate, time.monotonic() + DEADLINE_S)
    for s in range(3):
        run.spawn(writer, run, s, 0, 0, np.random.default_rng(s + 10))
    run.spawn(reader, run, 0, np.random.default_rng(0))
    joined = 0
    while joined < len(run.threads):  # threads spawn threads: join until none is left
        run.threads[joined].join(timeout=max(0.0, run.deadline - time.monotonic()) + 1.0)
        assert not run.threads[joined].is_alive(), "a thread did not finish: deadlock?"
        joined += 1
    assert not run.errors, run.errors
    order = sorted(n for nodes in run.written.values() for n in nodes)
    assert run.received[0] == order, "reader 0 must get every node, in the total order"
    begin = {0: 0}
    for r, (by, index) in sorted(run.start.items()):
        begin[r] = begin[by] + index
    assert sorted(begin) == [0, 1, 2, 3]
    for r in run.start:
        got = run.received[r]
        assert got == order[begin[r] : begin[r] + len(got)], f"reader {r} from its start"
        assert r in run.removed or begin[r] + len(got) == len(order), f"reader {r} stopped early"
    assert gate.occupancy() == 0
    gate._check()


@pytest.mark.parametrize(
    "method", ["add_readers", "remove_readers", "add_sources", "remove_sources"]
)
def test_concurrent_elastic_calls_exactly_one_succeeds(method: str) -> None:
    gate = ElasticScaleGate(range(4), range(4), capacity=64, max_sources=8, max_readers=8)
    ids = [2, 3] if method.startswith("remove") else [6, 7]
    barrier = threading.Barrier(4, timeout=10)
    results: list[bool] = []

    def call(by: int) -> None:
        barrier.wait()
        results.append(getattr(gate, method)(ids, by))

    threads = [threading.Thread(target=call, args=(by,), daemon=True) for by in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
        assert not thread.is_alive()
    assert sorted(results) == [False, False, False, True]
    gate._check()
