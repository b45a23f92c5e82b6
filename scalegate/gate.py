"""The Elastic ScaleGate (ESG): the TB object of Table II over an array-backed skip list.

Sources add timestamp-sorted streams; every reader gets every ready node exactly once, in
the total order (ts, source, seq) of docs/design.md decision 2, where ``seq`` counts the nodes a
source added. Readiness is Definition 3 with ties (see ``scalegate._kernels``). Readers and
sources join and leave at run time as section 6 of the paper describes: a new reader copies
the handle of the reader that adds it, a new source gets a DUMMY node after the handle of
the source that adds it (Lemma 3), a removed source leaves a FLUSH node. This class checks
arguments, calls the kernels and turns their status codes into exceptions and back-off.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from operator import index
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from scalegate import _kernels as k
from scalegate._memory import lazy_zeros
from scalegate._nodes import (
    BUSY,
    CONTROL,
    DATA,
    DUMMY,
    E_BACKWARDS,
    E_CLOSED,
    E_INACTIVE,
    E_RESERVED,
    E_UNSORTED,
    FLUSH,
    FULL,
    HEAD,
    L_WIDTH,
    M_FREE_TOP,
    M_LEN,
    M_LOG_MASK,
    M_RDR_HI,
    M_READY_END,
    M_READY_N,
    M_READY_TAIL,
    M_RESERVE,
    M_RNG,
    M_SRC_HI,
    M_UNUSED,
    N_HEIGHT,
    N_KIND,
    N_NEXT,
    N_PAYLOAD,
    N_SEQ,
    N_SRC,
    N_TS,
    NIL,
    R_ACTIVE,
    R_COLUMNS,
    R_POS,
    REFUSED,
    S_ACTIVE,
    S_DONE,
    S_FINGER,
    S_FRONTIER,
    S_SEQ,
    TS_MAX,
    TS_MIN,
    WATERMARK,
)
from stretch.errors import CapacityError, StoppedError

__all__ = ["ElasticScaleGate", "ReadyBatch"]

_USER_KINDS = frozenset({DATA, CONTROL, WATERMARK})
LOG_START_ROWS = 1024
"""Rows of the ready log's ring at the start (it doubles as the ready nodes held grow)."""
_YIELDS = 8  # back-off attempts that only yield before sleeping
_FIRST_SLEEP_S = 1e-6
_MAX_SLEEP_S = 1e-3


def _backoff(attempt: int) -> None:
    """Exponential back-off in Python, outside the kernels: yield, then sleep 1 us .. 1 ms."""
    if attempt < _YIELDS:
        time.sleep(0)
    else:
        time.sleep(min(_MAX_SLEEP_S, _FIRST_SLEEP_S * 2.0 ** min(attempt - _YIELDS, 16)))


@dataclass(frozen=True, slots=True)
class ReadyBatch:
    """Ready nodes for one reader, in the total order; ``len()`` is 0 when none was ready."""

    ts: NDArray[np.int64]
    source: NDArray[np.int64]
    seq: NDArray[np.int64]
    kind: NDArray[np.int8]
    payload: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.ts.shape[0])


class ElasticScaleGate:
    """Elastic ScaleGate: merges per-source sorted streams for several readers.

    Args:
        sources: Ids of the initial sources, in ``[0, max_sources)``.
        readers: Ids of the initial readers, in ``[0, max_readers)``; they start at the head.
        capacity: Nodes the gate can hold before adds block or fail (flow control). Must
            exceed ``max_sources``. ``reserve = max(max_sources, capacity // 2)`` rows are
            kept for the source that holds back readiness (the bound), so sources far
            ahead cannot fill the gate and starve it (no deadlock), and the bound has room
            to catch up in large batches.
        max_sources: Upper bound (exclusive) of source ids.
        max_readers: Upper bound (exclusive) of reader ids.
        block: When full, adds back off until readers free room (True) or raise
            ``CapacityError`` adding nothing (False).

    Attributes:
        block: Whether full adds back off (True) or raise ``CapacityError`` (False).
        reserve: Rows only the bound source may fill (flow control, see ``docs/scalegate.md``).

    Complexity: C = capacity, L = skip-list levels (log4 C), S = max_sources,
    R = max_readers, d = nodes between a source's previous node and its new one, k =
    nodes a reader passes. Reclamation of the prefix every reader passed costs
    O(freed + R + S L) per pass and runs when an add finds fewer reclaimed rows than it
    needs and either no unused rows or C_used / 8 rows taken since the last pass (rows
    never used are taken after it, so memory follows the nodes held), so it is O(1)
    amortised per node; so is advancing the ready prefix.

    """

    def __init__(
        self,
        sources: Iterable[int],
        readers: Iterable[int],
        capacity: int = 1 << 16,
        max_sources: int = 64,
        max_readers: int = 64,
        block: bool = True,
    ) -> None:
        if not capacity > max_sources >= 1 or max_readers < 1:
            msg = (
                f"need capacity ({capacity}) > max_sources ({max_sources}) >= 1 and "
                f"max_readers ({max_readers}) >= 1: max_sources rows are the flow-control reserve"
            )
            raise ValueError(msg)
        self._max_sources = max_sources
        self._max_readers = max_readers
        self.block = block
        self.reserve: int
        levels = max(2, (capacity.bit_length() + 1) // 2 + 1)
        # Memory follows the nodes held, not the capacity (scalegate._memory): a row's
        # next pointers are written when it is linked, up to its height, the only ones read.
        self._nodes = lazy_zeros((capacity + 1, N_NEXT + levels))
        self._nodes[HEAD, :N_NEXT] = (TS_MIN, -1, -1, DUMMY, 0, levels)
        self._nodes[HEAD, N_NEXT:] = NIL
        self._sources = np.zeros((max_sources, S_FINGER + levels), dtype=np.int64)
        self._sources[:, S_FRONTIER] = TS_MIN
        self._readers = np.zeros((max_readers, R_COLUMNS), dtype=np.int64)
        self._free = lazy_zeros((capacity,))
        log_rows = 1 << (capacity - 1).bit_length()  # the ready log's ring grows up to this
        self._ready = lazy_zeros((log_rows, L_WIDTH))
        self._meta = np.zeros(M_LEN, dtype=np.int64)
        self._meta[M_FREE_TOP] = 0
        self._meta[M_UNUSED] = capacity
        self._meta[M_RNG] = 0x2545F491
        self._meta[M_RESERVE] = self.reserve = max(max_sources, capacity // 2)
        self._meta[M_LOG_MASK] = min(log_rows, LOG_START_ROWS) - 1
        for s in self._ids(sources, max_sources, "source"):
            self._sources[s, S_ACTIVE] = 1
            self._meta[M_SRC_HI] = max(self._meta[M_SRC_HI], s + 1)
        for r in self._ids(readers, max_readers, "reader"):
            self._readers[r, R_ACTIVE] = 1
            self._meta[M_RDR_HI] = max(self._meta[M_RDR_HI], r + 1)
        self._state = (
            self._nodes,
            self._sources,
            self._readers,
            self._free,
            self._meta,
            self._ready,
        )

    @property
    def capacity(self) -> int:
        """The number of nodes the gate can hold."""
        return int(self._free.shape[0])

    # -- add (Table II: add(t, j)) ------------------------------------------------------

    def add_tuple(self, source_id: int, ts: int, payload: int = 0, kind: int = DATA) -> None:
        """Add one node from ``source_id``; O(log d) expected.

        Args:
            source_id: An active source.
            ts: Event time in ms, not before the source's last ts. ``TS_MAX`` is allowed
                only for a WATERMARK node, and ends the source.
            payload: An int64 the readers get back (a row id, a control-queue slot).
            kind: DATA, CONTROL or WATERMARK.

        Raises:
            ValueError: Unknown/inactive/ended source, ts going backwards, bad kind; the
                gate is unchanged.
            CapacityError: The gate is full and ``block`` is False.

        """
        if kind not in _USER_KINDS:
            msg = f"source {source_id}: kind {kind} is not DATA, CONTROL or WATERMARK"
            raise ValueError(msg)
        self._add_node(self._source_id(source_id), index(ts), index(payload), kind, False)

    def add_watermark(
        self, source_id: int, ts: int, stop: Callable[[], bool] | None = None
    ) -> None:
        """Add a WATERMARK node; ``ts == TS_MAX`` (INT64 max) ends the source. O(log d).

        Raises:
            StoppedError: ``stop()`` became true while the add waited for room.

        """
        self._add_node(self._source_id(source_id), index(ts), 0, WATERMARK, False, stop)

    def add_control(self, source_id: int, payload: int) -> None:
        """Add a CONTROL node at the source's last ts (gamma, Alg. 5), after its last node."""
        self._add_node(self._source_id(source_id), 0, index(payload), CONTROL, True)

    def add_batch(
        self,
        source_id: int,
        ts: ArrayLike,
        payload: ArrayLike,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        """Add DATA nodes; ``ts`` non-decreasing and not before the source's last ts.

        O(n log d). When full: with ``block`` the batch goes in as room frees (readers may
        see part of it before the call returns) until ``stop()`` is true; without, nothing
        is added.

        Raises:
            ValueError: As ``add_tuple``, or mismatched lengths; the gate is unchanged.
            CapacityError: The whole batch does not fit and ``block`` is False.
            StoppedError: ``stop()`` became true while the add waited for room; a prefix
                of the batch may have gone in.

        """
        s = self._source_id(source_id)
        ts_arr, pl_arr = self._columns(s, ts, payload)
        done, attempt = 0, 0
        while done < ts_arr.shape[0]:
            n = k.add_batch(*self._state, s, ts_arr[done:], pl_arr[done:], self.block)
            if n > 0:
                done, attempt = done + n, 0
            else:
                self._raise_add(n, s, ts_arr[done:], ts_arr.shape[0] - done)
                self._wait(s, attempt, stop)
                attempt += 1

    def offer_batch(self, source_id: int, ts: ArrayLike, payload: ArrayLike) -> int:
        """Add the prefix of DATA nodes that flow control admits now; return its length.

        Never waits for room (only, briefly, for the gate's lock): 0 means nothing fits
        now. Arguments as ``add_batch``. O(n log d).

        Raises:
            ValueError: As ``add_batch``; the gate is unchanged.

        """
        s = self._source_id(source_id)
        ts_arr, pl_arr = self._columns(s, ts, payload)
        attempt = 0
        while (n := k.add_batch(*self._state, s, ts_arr, pl_arr, True)) == BUSY:
            _backoff(attempt)
            attempt += 1
        if n == FULL:
            return 0
        if n < 0:
            self._raise_add(n, s, ts_arr, ts_arr.shape[0])
        return int(n)

    def offer_control(self, source_id: int, payload: int) -> bool:
        """``add_control`` if flow control admits the node now; return whether it went in."""
        return self._offer_node(self._source_id(source_id), 0, index(payload), CONTROL, True)

    def offer_watermark(self, source_id: int, ts: int) -> bool:
        """``add_watermark`` if flow control admits the node now; return whether it went in."""
        return self._offer_node(self._source_id(source_id), index(ts), 0, WATERMARK, False)

    def _columns(
        self, s: int, ts: ArrayLike, payload: ArrayLike
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        ts_arr = np.ascontiguousarray(ts, dtype=np.int64)
        pl_arr = np.ascontiguousarray(payload, dtype=np.int64)
        if ts_arr.ndim != 1 or ts_arr.shape != pl_arr.shape:
            msg = f"source {s}: ts {ts_arr.shape} and payload {pl_arr.shape} differ or are not 1-d"
            raise ValueError(msg)
        return ts_arr, pl_arr

    def _add_node(
        self,
        s: int,
        ts: int,
        payload: int,
        kind: int,
        at_frontier: bool,
        stop: Callable[[], bool] | None = None,
    ) -> None:
        attempt = 0
        while (status := k.add_node(*self._state, s, ts, payload, kind, at_frontier)) != 1:
            self._raise_add(status, s, np.array([ts], dtype=np.int64), 1)
            self._wait(s, attempt, stop)
            attempt += 1

    def _offer_node(self, s: int, ts: int, payload: int, kind: int, at_frontier: bool) -> bool:
        attempt = 0
        while (status := k.add_node(*self._state, s, ts, payload, kind, at_frontier)) == BUSY:
            _backoff(attempt)
            attempt += 1
        if status == FULL:
            return False
        if status != 1:
            self._raise_add(status, s, np.array([ts], dtype=np.int64), 1)
        return True

    @staticmethod
    def _wait(s: int, attempt: int, stop: Callable[[], bool] | None) -> None:
        """Back off before retrying an add, unless ``stop()`` says to give up.

        ``stop`` is called once per retry, so a caller may also use it to nudge the
        readers that free room.
        """
        if stop is not None and stop():
            msg = f"source {s}: stopped while waiting for room in the gate"
            raise StoppedError(msg)
        _backoff(attempt)

    def _raise_add(self, status: int, s: int, ts: NDArray[np.int64], need: int) -> None:
        """Raise for a failed add, or return when it should be retried (BUSY, FULL+block)."""
        if status == BUSY or (status == FULL and self.block):
            return
        if status == FULL:
            msg = (
                f"source {s}: no room for {need} nodes (capacity {self.capacity}, of which "
                f"{self.reserve} are reserved for the source holding back readiness); "
                "let readers consume and other sources catch up, or use block=True"
            )
            raise CapacityError(msg)
        last = int(self._sources[s, S_FRONTIER])
        messages = {
            E_INACTIVE: f"source {s} is not a source of this gate",
            E_CLOSED: f"source {s} has ended (watermark {TS_MAX}); it cannot add more",
            E_BACKWARDS: f"source {s}: ts {ts[0]} is before its last ts {last}",
            E_RESERVED: f"source {s}: ts {TS_MAX} (INT64 max) is only for the end watermark",
        }
        if status == E_UNSORTED:
            i = int(np.flatnonzero(np.diff(ts) < 0)[0])
            msg = f"source {s}: batch ts decrease: ts[{i}]={ts[i]} > ts[{i + 1}]={ts[i + 1]}"
        else:
            msg = messages[status]
        raise ValueError(msg)

    # -- get (Table II: get(j)) ---------------------------------------------------------

    def get_next_ready_tuple(self, reader_id: int) -> tuple[int, int, int, int, int] | None:
        """Return the reader's next ready node as (ts, source, seq, kind, payload), or None.

        DUMMY and FLUSH nodes are passed silently. O(k) for k nodes passed.

        Raises:
            ValueError: ``reader_id`` is not an active reader.

        """
        r = self._reader_id(reader_id)
        args = (self._nodes, self._sources, self._readers, self._meta, self._ready, r)
        attempt = 0
        while (res := k.get_one(*args))[0] == BUSY:
            _backoff(attempt)
            attempt += 1
        if res[0] == E_INACTIVE:
            self._raise_inactive_reader(args[-1])
        if res[0] == 0:
            return None
        return int(res[1]), int(res[2]), int(res[3]), int(res[4]), int(res[5])

    def get_ready_batch(self, reader_id: int, max_n: int) -> ReadyBatch:
        """Up to ``max_n`` ready nodes for the reader, in order; O(k) for k passed.

        Raises:
            ValueError: ``reader_id`` is not an active reader.

        """
        r = self._reader_id(reader_id)
        attempt = 0
        while (res := k.get_batch(*self._state, r, max(0, index(max_n))))[0] == BUSY:
            _backoff(attempt)
            attempt += 1
        if res[0] == E_INACTIVE:
            self._raise_inactive_reader(r)
        return ReadyBatch(res[1], res[2], res[3], res[4], res[5])

    def _raise_inactive_reader(self, r: int) -> None:
        msg = f"reader {r} is not a reader of this gate"
        raise ValueError(msg)

    # -- elasticity (Table II, highlighted methods; section 6) --------------------------

    def add_readers(self, new_reader_ids: Iterable[int], by_reader: int) -> bool:
        """Add readers that start where ``by_reader`` is: they get what it gets next.

        Returns True only if every id was added; False (nothing changed) if one is already
        a reader or ``by_reader`` is not one. Of concurrent identical calls exactly one
        returns True. O(R + |ids|).
        """
        return self._change_readers(new_reader_ids, by_reader, add=True)

    def remove_readers(self, reader_ids: Iterable[int], by_reader: int) -> bool:
        """Remove readers, freeing their positions for reclamation; True iff all removed.

        ``by_reader`` must be an active reader (it may remove itself). O(R + |ids|).
        """
        return self._change_readers(reader_ids, by_reader, add=False)

    def add_sources(self, new_source_ids: Iterable[int], by_source: int) -> bool:
        """Add sources initialised from ``by_source``'s handle with a DUMMY node (Lemma 3).

        A new source's frontier is ``by_source``'s last ts, plus 1 ms when its id is lower
        (so that its nodes follow all of ``by_source``'s in the total order and nothing
        already ready becomes unready), and never below the frontier of an earlier life of
        the same id; its adds must not go below it. The DUMMY node is left out when flow
        control has no room for it (readers never see it). Never blocks. True only if every
        id was added. O(|ids| (S L + log d)).

        Raises:
            ValueError: ``by_source`` has ended, or stands at ``TS_MAX`` (an id added again
                after it ended): no later ts is left for a new source to start at.

        """
        return self._change_sources(new_source_ids, by_source, add=True)

    def remove_sources(self, source_ids: Iterable[int], by_source: int) -> bool:
        """Remove sources, each leaving a FLUSH node at its last ts; True iff all removed.

        A removed source no longer holds back readiness: its pending nodes become ready as
        the other sources pass them. The FLUSH node is left out when flow control has no
        room for it (readers never see it). Never blocks. O(|ids| (S L + log d)).
        """
        return self._change_sources(source_ids, by_source, add=False)

    def _change_readers(self, ids: Iterable[int], by: int, add: bool) -> bool:
        arr = np.array(self._ids(ids, self._max_readers, "reader"), dtype=np.int64)
        by_r = self._reader_id(by)
        attempt = 0
        while (status := k.change_readers(self._readers, self._meta, arr, by_r, add)) == BUSY:
            _backoff(attempt)
            attempt += 1
        return bool(status != REFUSED)

    def _change_sources(self, ids: Iterable[int], by: int, add: bool) -> bool:
        arr = np.array(self._ids(ids, self._max_sources, "source"), dtype=np.int64)
        by_s = self._source_id(by)
        attempt = 0
        while (status := k.change_sources(*self._state, arr, by_s, add)) == BUSY:
            _backoff(attempt)
            attempt += 1
        if status == E_CLOSED:
            msg = f"source {by_s} has ended (its frontier is {TS_MAX}); it cannot add sources"
            raise ValueError(msg)
        return bool(status == 0)

    # -- state ----------------------------------------------------------------------------

    def watermark(self) -> int:
        """Min frontier over active sources (TS_MAX for ended or none): all up to it is ready.

        O(S).
        """
        attempt = 0
        while (res := k.watermark(self._sources, self._meta))[0] == BUSY:
            _backoff(attempt)
            attempt += 1
        return int(res[1])

    def fits(self, source_id: int, ts: ArrayLike) -> bool:
        """Whether ``add_batch(source_id, ts, ...)`` would go in now without waiting.

        A snapshot: other sources may take the room before the add. Flow control counts,
        so a source that does not hold back readiness may be refused with rows still
        free. O(len(ts) + freed).
        """
        s = self._source_id(source_id)
        stamps = np.ascontiguousarray(ts, dtype=np.int64)
        attempt = 0
        while (admitted := k.admits(*self._state, s, stamps)) == BUSY:
            _backoff(attempt)
            attempt += 1
        return bool(admitted == len(stamps))

    def occupancy(self) -> int:
        """Nodes held after reclaiming what every reader passed; O(freed + R + S L)."""
        attempt = 0
        while (held := k.occupancy(*self._state)) == BUSY:
            _backoff(attempt)
            attempt += 1
        return int(held)

    @property
    def sources(self) -> frozenset[int]:
        """Ids of the active sources (a racy snapshot)."""
        return frozenset(int(s) for s in np.flatnonzero(self._sources[:, S_ACTIVE]))

    @property
    def readers(self) -> frozenset[int]:
        """Ids of the active readers (a racy snapshot)."""
        return frozenset(int(r) for r in np.flatnonzero(self._readers[:, R_ACTIVE]))

    def _check(self) -> None:
        """Assert every structural invariant on a snapshot taken under the lock; O(C L)."""
        attempt = 0
        while not k.try_lock(self._meta):
            _backoff(attempt)
            attempt += 1
        try:
            nodes, sources, readers, free, meta, ready = (a.copy() for a in self._state)
        finally:
            k.unlock(self._meta)
        _check_state(nodes, sources, readers, free, meta, ready)

    # -- argument checks --------------------------------------------------------------------

    @staticmethod
    def _ids(ids: Iterable[int], bound: int, what: str) -> list[int]:
        out = [index(i) for i in ids]
        bad = [i for i in out if not 0 <= i < bound]
        if bad or len(set(out)) != len(out):
            msg = f"{what} ids {out} must be distinct and in [0, {bound}); offending: {bad or out}"
            raise ValueError(msg)
        return out

    def _source_id(self, source_id: int) -> int:
        s = index(source_id)
        return s if 0 <= s < self._max_sources else self._ids((s,), self._max_sources, "source")[0]

    def _reader_id(self, reader_id: int) -> int:
        r = index(reader_id)
        return r if 0 <= r < self._max_readers else self._ids((r,), self._max_readers, "reader")[0]


def _check_state(nodes: Any, sources: Any, readers: Any, free: Any, meta: Any, log: Any) -> None:
    """Assert the invariants of the gate's arrays (see ``ElasticScaleGate._check``)."""
    capacity, levels = free.shape[0], nodes.shape[1] - N_NEXT
    key = [tuple(row) for row in nodes[:, N_TS : N_SEQ + 1].tolist()]
    listed = [HEAD]
    while (x := int(nodes[listed[-1], N_NEXT])) != NIL:
        assert key[listed[-1]] < key[x], f"level 0 out of order at row {x}"
        listed.append(x)
    position = {x: i for i, x in enumerate(listed)}
    unused = int(meta[M_UNUSED])
    free_rows = free[: meta[M_FREE_TOP]].tolist() + list(range(capacity - unused + 1, capacity + 1))
    assert len(listed) - 1 + len(free_rows) == capacity, "rows leaked or double counted"
    assert not set(free_rows) & set(position), "a free row is still linked"
    for lvl in range(1, levels):
        below = [x for x in listed if nodes[x, N_HEIGHT] > lvl]
        chain, x = [HEAD], int(nodes[HEAD, N_NEXT + lvl])
        while x != NIL:
            chain.append(x)
            x = int(nodes[x, N_NEXT + lvl])
        assert chain == below, f"level {lvl} is not the sublist of towers taller than {lvl}"
    b_ts, b_src = k.ready_bound(sources, meta, -1)
    ready = [x == HEAD or key[x][:2] <= (b_ts, b_src) for x in listed]
    assert ready == sorted(ready, reverse=True), "the ready nodes are not a prefix"
    tail = int(meta[M_READY_TAIL])
    assert tail in position and ready[position[tail]], "the ready cursor is off the list"
    assert position[tail] == meta[M_READY_N], "the ready count does not match the cursor"
    after = position[tail] + 1
    assert after == len(listed) or not ready[after], "a ready node is not in the ready log yet"
    # Flow control: one row is always free or ready, so the bound source can add.
    assert ready.count(False) <= capacity - 1, "unready nodes fill the gate"
    end, held = int(meta[M_READY_END]), int(meta[M_READY_N])
    mask = int(meta[M_LOG_MASK])
    assert held <= mask + 1 <= log.shape[0], "the ready log's ring cannot hold the ready nodes"
    logged = [log[i & mask].tolist() for i in range(end - held, end)]
    linked = [
        [*nodes[x, : N_PAYLOAD + 1].tolist(), x, int(nodes[x, N_HEIGHT])]
        for x in listed[1 : held + 1]
    ]
    assert logged == linked, "the ready log does not hold the ready nodes in order"
    for r in np.flatnonzero(readers[:, R_ACTIVE]):
        pos = int(readers[r, R_POS])
        assert pos >= end - held, f"reader {r} is at {pos}, before the nodes held"
        assert pos <= end, f"reader {r} passed a node not ready"
    for s in range(meta[M_SRC_HI]):
        mine = [key[x] for x in listed[1:] if nodes[x, N_SRC] == s]
        assert all(k_[0] <= sources[s, S_FRONTIER] for k_ in mine), f"source {s} frontier"
        assert all(k_[2] < sources[s, S_SEQ] for k_ in mine), f"source {s} seq counter"
        assert sources[s, S_DONE] == 0 or sources[s, S_FRONTIER] == TS_MAX, f"source {s} done"
        for lvl in range(levels):
            f = int(sources[s, S_FINGER + lvl])
            assert f in position and nodes[f, N_HEIGHT] > lvl, f"source {s} finger {lvl}"
            assert key[f] <= (sources[s, S_FRONTIER], s, sources[s, S_SEQ]), f"source {s} finger"
    assert meta[M_SRC_HI] <= sources.shape[0] and meta[M_RDR_HI] <= readers.shape[0]
    assert not sources[meta[M_SRC_HI] :, S_ACTIVE].any(), "source id above the high-water mark"
    assert not readers[meta[M_RDR_HI] :, R_ACTIVE].any(), "reader id above the high-water mark"
    assert all(nodes[x, N_KIND] in (DATA, DUMMY, FLUSH, CONTROL, WATERMARK) for x in listed)
