"""The ESG against a reference model on ``SortedList``: a hypothesis state machine.

The model keeps every held node in the total order (ts, source, seq), decides readiness by
Definition 3 with ties, and mirrors reclamation so that occupancy and ``CapacityError``
(small capacities, ``block=False``) are predicted exactly.
"""

from __future__ import annotations

from typing import Any, cast

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from numba import config
from sortedcontainers import SortedList

from scalegate import CONTROL, DATA, DUMMY, FLUSH, TS_MAX, TS_MIN, WATERMARK, ElasticScaleGate
from scalegate import gate as gate_module
from stretch.errors import CapacityError

MAX_SOURCES = 4
MAX_READERS = 4
Node = tuple[int, int, int, int, int]  # ts, source, seq, kind, payload


class Model:
    """An obviously right ESG: a sorted list, frontiers, reader positions as nodes."""

    def __init__(self, sources: range, readers: range, capacity: int) -> None:
        self.nodes: Any = SortedList()
        self.capacity = capacity
        self.budget = capacity - max(MAX_SOURCES, capacity // 2)  # unready rows for non-bound
        self.active = set(sources)
        self.done: set[int] = set()
        self.frontier = dict.fromkeys(range(MAX_SOURCES), TS_MIN)
        self.seq = dict.fromkeys(range(MAX_SOURCES), 0)
        self.pos: dict[int, Node | None] = dict.fromkeys(readers)  # None: before the first

    def bound(self, skip: int = -1) -> tuple[int, int]:
        live = [(self.frontier[s], s) for s in self.active - self.done if s != skip]
        return min(live, default=(TS_MAX, MAX_SOURCES))

    def ready(self, node: Node) -> bool:
        return (node[0], node[1]) <= self.bound()

    def unready(self) -> int:
        return sum(1 for n in self.nodes if not self.ready(n))

    def reclaim(self) -> None:
        """Drop the nodes every reader passed (without readers: the ready ones)."""
        if self.pos:
            passed = [p for p in self.pos.values() if p is not None]
            stop = min(passed) if len(passed) == len(self.pos) else None
        else:
            stop = max((n for n in self.nodes if self.ready(n)), default=None)
        if stop is not None:
            del self.nodes[: self.nodes.bisect_right(stop)]
            self.pos = {r: (None if p == stop else p) for r, p in self.pos.items()}

    def room(self, need: int) -> int:
        if self.capacity - len(self.nodes) < need:
            self.reclaim()
        return self.capacity - len(self.nodes)

    def admits(self, s: int, ts: list[int]) -> bool:
        """Flow control: the bound source needs a free row, others stay within the reserve."""
        room, unready, other = self.room(len(ts)), self.unready(), self.bound(skip=s)
        frontier = self.frontier[s]
        for t in ts[:room]:
            if (frontier, s) > other:
                if unready >= self.budget:
                    return False
                unready += 1
            elif (t, s) > other:
                unready += 1
            frontier = t
        return room >= len(ts)

    def insert(self, s: int, ts: int, kind: int, payload: int) -> None:
        self.nodes.add((ts, s, self.seq[s], kind, payload))
        self.seq[s] += 1
        self.frontier[s] = ts
        if kind == WATERMARK and ts == TS_MAX:
            self.done.add(s)

    def add(self, s: int, ts: list[int], payloads: list[int], kind: int) -> type[Exception] | None:
        """Apply an add as the gate must; return the exception it must raise, if any."""
        if not ts:
            return None
        bad_ts = (ts[-1] == TS_MAX and kind != WATERMARK) or ts != sorted(ts)
        if bad_ts or s not in self.active or s in self.done or ts[0] < self.frontier[s]:
            return ValueError
        if not self.admits(s, ts):
            return CapacityError
        for t, p in zip(ts, payloads, strict=True):
            self.insert(s, t, kind, p)
        return None

    def get(self, r: int, max_n: int) -> list[Node]:
        pos, out = self.pos[r], list[Node]()
        i = 0 if pos is None else self.nodes.bisect_right(pos)
        while len(out) < max_n and i < len(self.nodes) and self.ready(self.nodes[i]):
            pos = self.nodes[i]
            if pos[3] not in (DUMMY, FLUSH):
                out.append(pos)
            i += 1
        self.pos[r] = pos
        return out

    def change_sources(self, ids: list[int], by: int, add: bool) -> type[Exception] | bool:
        if by not in self.active or any((i in self.active) == add for i in ids):
            return False
        if add and (by in self.done or self.frontier[by] == TS_MAX):
            return ValueError
        for i in ids:
            if add:
                start = self.frontier[by] + (i < by and self.frontier[by] < TS_MAX)
                self.frontier[i] = max(start, self.frontier[i])
                self.active.add(i)
                self.done.discard(i)
            if i not in self.done:
                ready = (self.frontier[i], i) <= self.bound(skip=-1 if add else i)
                fits = self.room(1) > 0 and (ready or self.unready() < self.budget)
                if fits:
                    self.insert(i, self.frontier[i], DUMMY if add else FLUSH, 0)
                else:
                    self.seq[i] += 1
            if not add:
                self.active.discard(i)
        return True

    def change_readers(self, ids: list[int], by: int, add: bool) -> bool:
        if by not in self.pos or any((i in self.pos) == add for i in ids):
            return False
        for i in ids:
            if add:
                self.pos[i] = self.pos[by]
            else:
                del self.pos[i]
        return True


def outcome(fn: Any, *args: Any) -> type[Exception] | Any:
    try:
        result = fn(*args)
    except (ValueError, CapacityError) as exc:
        event(f"{fn.__name__}: {type(exc).__name__}")
        return type(exc)
    event(f"{fn.__name__}: {result}")
    return result


ids = st.lists(st.integers(0, MAX_SOURCES - 1), max_size=2, unique=True)
reader_ids = st.lists(st.integers(0, MAX_READERS - 1), max_size=2, unique=True)
picks = st.integers(0, 15)  # below the id bound: that id; above: an active one


class GateMachine(RuleBasedStateMachine):
    """Random interleavings of every gate method, checked step by step against Model."""

    gate: ElasticScaleGate
    model: Model

    @initialize(
        capacity=st.sampled_from([5, 8, 16, 1024]),
        n_sources=st.integers(1, 3),
        n_readers=st.integers(0, 2),
        log_start_rows=st.sampled_from([1, 2, gate_module.LOG_START_ROWS]),
    )
    def start(self, capacity: int, n_sources: int, n_readers: int, log_start_rows: int) -> None:
        saved = gate_module.LOG_START_ROWS
        gate_module.LOG_START_ROWS = log_start_rows  # a small ring doubles as nodes get ready
        try:
            self.gate = ElasticScaleGate(
                range(n_sources), range(n_readers), capacity, MAX_SOURCES, MAX_READERS, block=False
            )
        finally:
            gate_module.LOG_START_ROWS = saved
        self.model = Model(range(n_sources), range(n_readers), capacity)
        self.payload = 0

    def _payloads(self, n: int) -> list[int]:
        self.payload += n
        return list(range(self.payload - n, self.payload))

    def _source(self, pick: int) -> int:
        """Mostly an active source that has not ended, sometimes any id (errors)."""
        live = sorted(self.model.active - self.model.done)
        return pick % MAX_SOURCES if pick < MAX_SOURCES or not live else live[pick % len(live)]

    def _reader(self, pick: int) -> int:
        live = sorted(self.model.pos)
        return pick % MAX_READERS if pick < MAX_READERS or not live else live[pick % len(live)]

    def _base(self, s: int) -> int:
        return max(self.model.frontier[s], 0) if self.model.frontier[s] < TS_MAX else 0

    @rule(pick=picks, deltas=st.lists(st.integers(-1, 2), max_size=5), per_tuple=st.booleans())
    def add(self, pick: int, deltas: list[int], per_tuple: bool) -> None:
        s = self._source(pick)
        ts = list(np.cumsum(deltas, dtype=np.int64) + self._base(s)) if deltas else []
        payloads = self._payloads(len(ts))
        if per_tuple:
            for t, p in zip(ts, payloads, strict=True):
                expected = self.model.add(s, [int(t)], [p], DATA)
                assert outcome(self.gate.add_tuple, s, int(t), p) == expected
        else:
            expected = self.model.add(s, [int(t) for t in ts], payloads, DATA)
            arrays = (np.array(ts, dtype=np.int64), np.array(payloads, dtype=np.int64))
            assert outcome(self.gate.add_batch, s, *arrays) == expected

    @rule(pick=picks, deltas=st.lists(st.integers(0, 2), min_size=1, max_size=8))
    def add_sorted(self, pick: int, deltas: list[int]) -> None:
        s = self._source(pick)
        ts = [int(t) for t in np.cumsum(deltas) + self._base(s)]
        payloads = self._payloads(len(ts))
        expected = self.model.add(s, ts, payloads, DATA)
        assert outcome(self.gate.add_batch, s, ts, payloads) == expected

    @rule(pick=picks, delta=st.integers(-1, 3), end=st.integers(0, 5))
    def add_watermark(self, pick: int, delta: int, end: int) -> None:
        s = self._source(pick)
        ts = TS_MAX if end == 0 else self._base(s) + delta
        expected = self.model.add(s, [ts], [0], WATERMARK)
        assert outcome(self.gate.add_watermark, s, ts) == expected

    @rule(pick=picks)
    def add_control(self, pick: int) -> None:
        s = self._source(pick)
        payload = self._payloads(1)
        expected = self.model.add(s, [self.model.frontier[s]], payload, CONTROL)
        assert outcome(self.gate.add_control, s, payload[0]) == expected

    @rule(pick=picks, max_n=st.integers(0, 8), per_tuple=st.booleans())
    def get(self, pick: int, max_n: int, per_tuple: bool) -> None:
        r = self._reader(pick)
        if r not in self.model.pos:
            with pytest.raises(ValueError, match=f"reader {r}"):
                self.gate.get_ready_batch(r, max_n)
            return
        if per_tuple:
            expected = self.model.get(r, 1)
            assert self.gate.get_next_ready_tuple(r) == (expected[0] if expected else None)
            return
        expected = self.model.get(r, max_n)
        event(f"get_ready_batch: {'some' if expected else 'none'} ready")
        batch = self.gate.get_ready_batch(r, max_n)
        assert batch.kind.dtype == np.int8 and batch.ts.dtype == np.int64
        got = list(zip(batch.ts.tolist(), batch.source.tolist(), batch.seq.tolist(), strict=True))
        assert got == [n[:3] for n in expected]
        assert batch.kind.tolist() == [n[3] for n in expected]
        assert batch.payload.tolist() == [n[4] for n in expected]

    @rule(new=ids, by=st.integers(0, MAX_SOURCES - 1), add=st.booleans())
    def change_sources(self, new: list[int], by: int, add: bool) -> None:
        expected = self.model.change_sources(new, by, add)
        method = self.gate.add_sources if add else self.gate.remove_sources
        assert outcome(method, new, by) == expected

    @rule(new=reader_ids, by=st.integers(0, MAX_READERS - 1), add=st.booleans())
    def change_readers(self, new: list[int], by: int, add: bool) -> None:
        expected = self.model.change_readers(new, by, add)
        method = self.gate.add_readers if add else self.gate.remove_readers
        assert method(new, by) == expected

    @invariant()
    def structure_matches_model(self) -> None:
        self.gate._check()
        self.model.reclaim()
        assert self.gate.occupancy() == len(self.model.nodes)
        assert self.gate.watermark() == self.model.bound()[0]
        assert self.gate.sources == frozenset(self.model.active)
        assert self.gate.readers == frozenset(self.model.pos)


NO_JIT = cast(Any, config).DISABLE_JIT
GateMachine.TestCase.settings = settings(
    max_examples=50 if NO_JIT else 150,
    stateful_step_count=30 if NO_JIT else 40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestGateMachine = GateMachine.TestCase
