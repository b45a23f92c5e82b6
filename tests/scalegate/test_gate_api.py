"""Unit tests of the ESG's public behaviour: ordering, errors, capacity, elasticity."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from scalegate import CONTROL, DATA, TS_MAX, WATERMARK, ElasticScaleGate, ReadyBatch
from stretch.errors import CapacityError

DEADLINE_S = 30.0


def drain(gate: ElasticScaleGate, reader: int) -> list[tuple[int, int, int, int, int]]:
    batch = gate.get_ready_batch(reader, 1 << 20)
    cols = (batch.ts, batch.source, batch.seq, batch.kind, batch.payload)
    return list(zip(*(c.tolist() for c in cols), strict=True))


def test_ties_break_by_source_then_seq_and_wait_for_lower_sources() -> None:
    gate = ElasticScaleGate([0, 1], [0], capacity=64, max_sources=4)
    gate.add_batch(1, [5, 5], [10, 11])
    assert gate.get_next_ready_tuple(0) is None  # source 0 may still add ts 5
    gate.add_tuple(0, 5, 20)
    assert drain(gate, 0) == [(5, 0, 0, DATA, 20)]  # source 1 may still add ts 5 after
    gate.add_tuple(1, 6, 12)
    assert drain(gate, 0) == []  # source 0 (lower id) may still add ts 5
    gate.add_tuple(0, 6, 21)
    assert drain(gate, 0) == [(5, 1, 0, DATA, 10), (5, 1, 1, DATA, 11), (6, 0, 1, DATA, 21)]
    assert gate.watermark() == 6
    gate._check()


def test_end_watermark_flushes_everything_and_readers_get_watermarks() -> None:
    gate = ElasticScaleGate([0, 1], [0], capacity=64, max_sources=4)
    gate.add_batch(0, np.arange(3), np.arange(3))
    gate.add_watermark(1, 1)
    gate.add_watermark(1, TS_MAX)
    gate.add_watermark(0, TS_MAX)
    got = drain(gate, 0)
    assert [n[0] for n in got] == [0, 1, 1, 2, TS_MAX, TS_MAX]
    assert [n[3] for n in got] == [DATA, DATA, WATERMARK, DATA, WATERMARK, WATERMARK]
    assert gate.watermark() == TS_MAX
    assert gate.occupancy() == 0
    with pytest.raises(ValueError, match="source 0 has ended"):
        gate.add_tuple(0, TS_MAX)


def test_an_id_added_again_after_its_end_cannot_add_sources() -> None:
    """An ended source added again stands at TS_MAX: no later ts for a lower id to start at.

    Found by the model test: source 1 ended, was removed and added again (by source 2), and
    then added source 0, whose DUMMY at (TS_MAX, 0) went in from source 1's handle, after
    source 1's own nodes at TS_MAX: the list fell out of order.
    """
    gate = ElasticScaleGate([0, 1, 2], [], capacity=16, max_sources=4, block=False)
    gate.add_watermark(1, TS_MAX)
    gate.add_batch(0, [0, 0], [1, 2])
    assert gate.remove_sources([0, 1], 0)
    gate.add_batch(2, [0], [3])
    assert gate.add_sources([1], 2)  # source 1 again, at TS_MAX: never below its end
    with pytest.raises(ValueError, match="source 1 has ended"):
        gate.add_sources([0], 1)
    assert gate.sources == frozenset({1, 2})
    gate._check()
    assert gate.add_sources([0], 2)  # from a source that has not ended, as before
    gate._check()


def test_control_sits_at_the_sources_last_ts_after_its_last_tuple() -> None:
    gate = ElasticScaleGate([0], [0], capacity=64, max_sources=4)
    gate.add_tuple(0, 7, 1)
    gate.add_control(0, 99)
    gate.add_tuple(0, 7, 2)
    assert drain(gate, 0) == [(7, 0, 0, DATA, 1), (7, 0, 1, CONTROL, 99), (7, 0, 2, DATA, 2)]


def test_get_returns_typed_empty_batch_when_nothing_is_ready() -> None:
    gate = ElasticScaleGate([0, 1], [0], capacity=64, max_sources=4)
    gate.add_tuple(1, 3)
    batch = gate.get_ready_batch(0, 10)
    assert isinstance(batch, ReadyBatch) and len(batch) == 0
    assert batch.ts.dtype == np.int64 and batch.kind.dtype == np.int8


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda g: g.add_tuple(0, 4), "source 0: ts 4 is before its last ts 5"),
        (lambda g: g.add_batch(0, [6, 5], [0, 0]), r"ts\[0\]=6 > ts\[1\]=5"),
        (lambda g: g.add_batch(0, [6, 7], [0]), "differ"),
        (lambda g: g.add_tuple(0, TS_MAX), "only for the end watermark"),
        (lambda g: g.add_tuple(2, 9), "source 2 is not a source"),
        (lambda g: g.add_tuple(9, 9), r"source ids \[9\] must be .* in \[0, 4\)"),
        (lambda g: g.add_tuple(0, 9, kind=1), "kind 1 is not DATA"),
        (lambda g: g.get_ready_batch(3, 1), "reader 3 is not a reader"),
        (lambda g: g.add_sources([2], 0), "source 0 has ended"),
    ],
)
def test_bad_calls_raise_value_error_and_change_nothing(call: object, match: str) -> None:
    gate = ElasticScaleGate([0, 1], [0], capacity=64, max_sources=4)
    gate.add_tuple(0, 5)
    if "ended" in match:
        gate.add_watermark(0, TS_MAX)
    before = (gate.occupancy(), gate.watermark(), gate.sources, gate.readers)
    with pytest.raises(ValueError, match=match):
        call(gate)  # type: ignore[operator]
    assert (gate.occupancy(), gate.watermark(), gate.sources, gate.readers) == before
    gate._check()


def test_capacity_error_adds_nothing_and_names_source_and_capacity() -> None:
    gate = ElasticScaleGate([0], [0], capacity=10, max_sources=2, block=False)
    gate.add_batch(0, np.arange(8), np.arange(8))
    with pytest.raises(CapacityError, match=r"source 0: no room for 3 nodes \(capacity 10"):
        gate.add_batch(0, [8, 9, 10], [0, 0, 0])
    assert gate.occupancy() == 8
    assert len(gate.get_ready_batch(0, 100)) == 8  # reading frees the rows
    gate.add_batch(0, [8, 9, 10], [0, 0, 0])
    assert [n[0] for n in drain(gate, 0)] == [8, 9, 10]


def test_wrap_around_never_loses_or_duplicates() -> None:
    gate = ElasticScaleGate([0, 1], [0, 1], capacity=12, max_sources=2, block=False)
    rng = np.random.default_rng(7)
    written: list[tuple[int, int, int]] = []
    got: dict[int, list[tuple[int, int, int]]] = {0: [], 1: []}
    last, seq = [0, 0], [0, 0]
    for _ in range(3000):
        s = int(rng.integers(2))
        ts = last[s] + int(rng.integers(0, 3))
        try:
            gate.add_tuple(s, ts)
        except CapacityError:
            pass
        else:
            written.append((ts, s, seq[s]))
            last[s], seq[s] = ts, seq[s] + 1
        r = int(rng.integers(2))
        got[r] += [n[:3] for n in drain(gate, r)]
        gate._check()
    for s in sorted((0, 1), key=lambda s: (last[s], s)):  # the bound source first
        gate.add_watermark(s, TS_MAX)
        for r in (0, 1):
            got[r] += [n[:3] for n in drain(gate, r) if n[0] != TS_MAX]
    assert got[0] == got[1] == sorted(written)
    assert len(written) > 2000


def read_until(gate: ElasticScaleGate, n: int, step: Callable[[], None] = lambda: None) -> int:
    """Read (in batches of 7) until ``n`` nodes arrived or the deadline passed."""
    got, deadline = 0, time.monotonic() + DEADLINE_S
    while got < n and time.monotonic() < deadline:
        batch = len(gate.get_ready_batch(0, 7))
        got += batch
        step()
        if batch == 0:
            time.sleep(0)  # yield to the writers; not a synchronisation
    return got


def test_block_waits_for_readers_and_takes_batches_larger_than_capacity() -> None:
    gate = ElasticScaleGate([0], [0], capacity=16, max_sources=2, block=True)
    writer = threading.Thread(
        target=lambda: gate.add_batch(0, np.arange(1000), np.arange(1000)), daemon=True
    )
    writer.start()
    assert read_until(gate, 1000) == 1000
    writer.join(timeout=DEADLINE_S)
    assert not writer.is_alive()


def test_source_far_ahead_cannot_starve_the_one_behind() -> None:
    """Flow control: a source 1000 ms ahead fills only capacity - reserve rows."""
    gate = ElasticScaleGate([0, 1], [0], capacity=40, max_sources=4, block=True)
    ahead = threading.Thread(
        target=lambda: gate.add_batch(1, 1000 + np.arange(500), np.arange(500)), daemon=True
    )
    behind = threading.Thread(
        target=lambda: gate.add_batch(0, np.arange(2000), np.arange(2000)), daemon=True
    )
    ahead.start()
    deadline = time.monotonic() + DEADLINE_S
    budget = gate.capacity - gate.reserve
    while gate.occupancy() < budget and time.monotonic() < deadline:
        time.sleep(0)  # wait (bounded) until source 1 is blocked by flow control
    assert gate.occupancy() == budget == 20 and ahead.is_alive()
    behind.start()

    def end_source_1_when_written() -> None:
        if not ahead.is_alive() and 1 in gate.sources:
            gate.remove_sources([1], by_source=1)

    assert read_until(gate, 2500, end_source_1_when_written) == 2500
    for thread in (ahead, behind):
        thread.join(timeout=DEADLINE_S)
        assert not thread.is_alive(), "flow control deadlocked"


def test_new_reader_starts_where_its_adder_is() -> None:
    gate = ElasticScaleGate([0], [0], capacity=64, max_sources=4)
    gate.add_batch(0, np.arange(5), np.arange(5))
    assert len(gate.get_ready_batch(0, 2)) == 2
    assert gate.add_readers([2, 3], by_reader=0)
    assert not gate.add_readers([3], by_reader=0)  # already a reader
    assert not gate.add_readers([1], by_reader=1)  # 1 is not a reader
    assert drain(gate, 2) == drain(gate, 0) == drain(gate, 3)
    assert gate.remove_readers([3], by_reader=3)
    assert not gate.remove_readers([3], by_reader=0)
    assert gate.readers == {0, 2}


def test_new_source_starts_at_adders_frontier_one_ms_later_when_lower() -> None:
    gate = ElasticScaleGate([2], [0], capacity=64, max_sources=4)
    gate.add_tuple(2, 10)
    assert gate.add_sources([3, 1], by_source=2)
    with pytest.raises(ValueError, match="ts 10 is before its last ts 11"):
        gate.add_tuple(1, 10)
    gate.add_tuple(3, 10)  # id above the adder: the same ts is fine
    gate.add_tuple(1, 11)
    assert [n[:2] for n in drain(gate, 0)] == [(10, 2)]  # 3 and 1 hold back the rest
    assert gate.remove_sources([1, 3], by_source=2)
    assert drain(gate, 0) == []  # source 2 may still add ts 10, before (10, 3)
    gate.add_tuple(2, 12)
    assert [n[:2] for n in drain(gate, 0)] == [(10, 3), (11, 1), (12, 2)]
    assert gate.sources == {2}
    gate._check()


def test_removed_source_no_longer_holds_back_readiness() -> None:
    gate = ElasticScaleGate([0, 1], [0], capacity=64, max_sources=4)
    gate.add_batch(1, [1, 2, 3], [0, 0, 0])
    assert drain(gate, 0) == []
    assert gate.remove_sources([0], by_source=1)
    assert [n[0] for n in drain(gate, 0)] == [1, 2, 3]
    assert not gate.remove_sources([0], by_source=1)
    assert not gate.add_sources([1], by_source=1)


def test_constructor_rejects_capacity_without_room_for_the_reserve() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ElasticScaleGate([0], [0], capacity=64, max_sources=64)
    with pytest.raises(ValueError, match="distinct"):
        ElasticScaleGate([0, 0], [0], capacity=64, max_sources=4)
