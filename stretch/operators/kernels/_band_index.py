"""The band-join kernel through an index: a probe scans only the cells that can match.

A join that declares a band (``stretch.operators.kernels.Band``: a key per side such
that every matching pair has ``|key_L - key_R| <= width``) runs here instead of the
nested loop of ``_band_join``. Each key's store of each side (the same contiguous
arrays as ``_band_join``'s, in insertion order between the bounds' head and tail) gets a
grid over its tuples' keys: cell ``floor(key / width)`` hashed to one of ``C`` cells
(``C`` a power of two), each cell a ring buffer of the store positions of its tuples, in
insertion order, so expiry is dropping the head of a cell (the positions below the
store's head). A tuple whose key is not finite goes to one more cell, the wild cell,
that every probe scans; a probe whose key is not finite scans the whole window.

A probe of key ``k`` reads the cells ``floor((k - width) / width)`` to ``floor((k +
width) / width)`` (three, widened by a rounding margin, so a fourth on a cell edge) and
the wild cell, and tests each live entry with the join's exact predicate. It writes a
match as (tuple index, key, partner seq, store position): the caller sorts a probe's
matches by store position, which is the stored order the reference emits them in
(``stretch.operators.joins``), then numbers them. The superset the cells return is the
band's business; the predicate decides.

When the cells a group of probes would scan hold more than a quarter of the window
(every key in one cell, a wide band), the group runs the nested loop of ``_band_join``
instead (its vectorized count then scan), so skewed data costs what the nested loop
costs, never more. A cell without room (after dropping its expired head) stops the
kernel before the tuple (``INDEX_FULL``); the caller rebuilds the grid with more room
(``grid_loads`` and ``grid_build``), choosing ``C`` and the cells' capacity so the grid
stays within a bound of the store's size.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stretch.operators.kernels._band_join import (
    BLOCK,
    DONE,
    GROUP,
    LAST,
    OUT_FULL,
    STORE_FULL,
    Columns,
    Fill,
    Match,
    _emit,
    _hedge_candidate,
    _hedge_match,
    _probe_left,
    _probe_right,
    _scalejoin_match,
    _store_row,
)

__all__ = [
    "INDEX_FULL",
    "grid_build",
    "grid_loads",
    "hedge_indexed_run",
    "scalejoin_indexed_run",
]

INDEX_FULL = 3
"""Kernel status: stopped before a tuple, the grid cell it goes to being full."""
MARGIN = 1e-9
"""Relative widening of a probe's range of cells: rounding never hides a match."""
NESTED_SHARE = 4
"""A group runs the nested loop when its cells hold over 1/NESTED_SHARE of the window."""


@njit(inline="always")
def _cell(key: float, width: float) -> int:
    """The unhashed cell of a finite key."""
    return int(np.floor(key / width))


@njit(inline="always")
def _range(key: float, width: float) -> tuple[int, int]:
    """The first and last unhashed cells a probe of finite ``key`` reads."""
    low = (key - width) / width
    high = (key + width) / width
    low -= abs(low) * MARGIN + MARGIN
    high += abs(high) * MARGIN + MARGIN
    return int(np.floor(low)), int(np.floor(high))


@njit(inline="always")
def _purge(
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    s: int,
    side: int,
    c: int,
    head: int,
) -> None:
    """Drop cell ``c``'s entries below the store's ``head`` (expired), from its head."""
    mask = cells.shape[3] - 1
    h, n = cell_head[s, side, c], cell_count[s, side, c]
    while n > 0 and cells[s, side, c, h] < head:
        h = (h + 1) & mask
        n -= 1
    cell_head[s, side, c], cell_count[s, side, c] = h, n


@njit(inline="always")
def _slot(key: float, width: float, wild: int) -> int:
    """The cell (hashed) a stored tuple of ``key`` goes to; ``wild`` if not finite."""
    if not np.isfinite(key) or abs(key / width) > 2.0**62:
        return wild
    return _cell(key, width) & (wild - 1)


@njit(inline="always")
def _probe_cells(key: float, width: float, cells_n: int) -> tuple[int, int, bool]:
    """A probe's range of unhashed cells, and whether the grid can serve it at all."""
    if not np.isfinite(key) or abs(key / width) > 2.0**61:
        return 0, -1, False
    low, high = _range(key, width)
    return low, high, high - low + 1 < cells_n


@njit(inline="always")
def _cell_entries(
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    s: int,
    other: int,
    u: int,
    high: int,
    head: int,
) -> tuple[int, int, int]:
    """Cell ``u`` of a probe's range (``high + 1``: the wild cell), purged: (c, head, n)."""
    wild = cells.shape[2] - 1
    c = wild if u == high + 1 else u & (wild - 1)
    _purge(cells, cell_head, cell_count, s, other, c, head)
    return c, cell_head[s, other, c], cell_count[s, other, c]


@njit(inline="always")
def _probe_left_cells(
    match: Match,
    left: Columns,
    row: int,
    stored_right: Columns,
    at: int,
    key_value: float,
    width: float,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    s: int,
    head: int,
    other_seq: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
    q: int,
    key: int,
) -> tuple[int, int]:
    """L tuple ``q`` against R's grid of slot s; the next ``n_out`` and entries read."""
    mask = cells.shape[3] - 1
    low, high, _ = _probe_cells(key_value, width, cells.shape[2] - 1)
    seen = 0
    for u in range(low, high + 2):
        c, h, n = _cell_entries(cells, cell_head, cell_count, s, 1, u, high, head)
        seen += n
        for e in range(n):
            p = cells[s, 1, c, (h + e) & mask]
            if match(left, row, stored_right, np.uint64(at + p)):
                n_out = _emit(out, n_out, q, key, other_seq[p], p)
    return n_out, seen


@njit(inline="always")
def _probe_right_cells(
    match: Match,
    right: Columns,
    row: int,
    stored_left: Columns,
    at: int,
    key_value: float,
    width: float,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    s: int,
    head: int,
    other_seq: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
    q: int,
    key: int,
) -> tuple[int, int]:
    """``_probe_left_cells`` for R tuple ``q`` against L's grid."""
    mask = cells.shape[3] - 1
    low, high, _ = _probe_cells(key_value, width, cells.shape[2] - 1)
    seen = 0
    for u in range(low, high + 2):
        c, h, n = _cell_entries(cells, cell_head, cell_count, s, 0, u, high, head)
        seen += n
        for e in range(n):
            p = cells[s, 0, c, (h + e) & mask]
            if match(stored_left, np.uint64(at + p), right, row):
                n_out = _emit(out, n_out, q, key, other_seq[p], p)
    return n_out, seen


@njit(inline="always")
def _group_candidates(
    run_key: NDArray[np.float64],
    first: int,
    stop: int,
    width: float,
    cell_count: NDArray[np.int64],
    s: int,
    other: int,
    window: int,
) -> int:
    """An upper bound of the entries the group's probes would read (a window if unserved)."""
    wild = cell_count.shape[2] - 1
    total = 0
    for q in range(first, stop):
        low, high, served = _probe_cells(run_key[q], width, wild)
        if not served:
            return (stop - first) * window
        total += cell_count[s, other, wild]
        for u in range(low, high + 1):
            total += cell_count[s, other, u & (wild - 1)]
    return total


@njit(inline="always")
def _room(
    run_seq: NDArray[np.int64],
    run_key: NDArray[np.float64],
    first: int,
    stop: int,
    keys: int,
    key: int,
    width: float,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    s: int,
    this: int,
    head: int,
) -> bool:
    """Whether each cell the group stores a tuple in has room for all the group stores."""
    wild = cells.shape[2] - 1
    cap = cells.shape[3]
    stores = 0
    for q in range(first, stop):
        stores += run_seq[q] % keys == key
    for q in range(first, stop):
        if run_seq[q] % keys == key:
            c = _slot(run_key[q], width, wild)
            _purge(cells, cell_head, cell_count, s, this, c, head)
            if cell_count[s, this, c] + stores > cap:
                return False
    return True


@njit(inline="always")
def _indexed_join(
    candidate: Match,
    match: Match,
    slot_keys: NDArray[np.int64],
    keys: int,
    ws: int,
    wa: int,
    progress: NDArray[np.int64],
    run_ts: NDArray[np.int64],
    run_source: NDArray[np.int64],
    run_seq: NDArray[np.int64],
    run_key: NDArray[np.float64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    store_key: NDArray[np.float64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    width: float,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> int:
    """``_band_join._band_join`` with each side's store indexed by a grid on its key.

    The arguments are ``_band_join``'s, plus ``run_key`` (each run tuple's band key),
    ``store_key`` (the stored tuples' keys, beside ``store_ts``), the band's ``width``
    and the grid: ``cells[s, side, c, e]`` the store positions of cell c's ring buffer
    (``C + 1`` cells, the last the wild one; a capacity that is a power of two), its
    head ``cell_head[s, side, c]`` and length ``cell_count[s, side, c]``. A match's
    fourth value is the partner's store position (stored order), not its rank. Returns
    ``DONE``, ``OUT_FULL``, ``STORE_FULL`` or ``INDEX_FULL`` (the caller rebuilds the
    grid with more room and calls again). ``stats`` holds the matches written, the
    comparisons made and the groups run as a nested loop.
    """
    n_out = stats[0]
    cap_out = out.shape[1]
    capacity = store_ts.shape[2]
    wild = cells.shape[2] - 1
    n = run_ts.shape[0]
    hits = np.empty((GROUP, capacity // BLOCK + 1), np.int64)
    rows = np.empty(GROUP, np.int64)
    for s in range(slot_keys.shape[0]):
        key = slot_keys[s]
        at = s * capacity
        i = progress[s]
        while i < n:
            this = 0 if run_source[i] == 0 else 1
            other = 1 - this
            ts = run_ts[i]
            earliest = ((ts - ws - 1) // wa + 1) * wa  # of the join's window: WS + 1
            stop = i + 1
            if earliest <= ts:
                while (
                    stop < n
                    and stop - i < GROUP
                    and run_ts[stop] == ts
                    and (run_source[stop] == 0) == (this == 0)
                ):
                    stop += 1
            head, tail = bounds[s, 2 * other], bounds[s, 2 * other + 1]
            reset = earliest > bounds[s, LAST]
            if reset:
                head = tail
            while head < tail and store_ts[s, other, head] + ws < ts:
                head += 1
            window = tail - head
            scan = _group_candidates(run_key, i, stop, width, cell_count, s, other, window)
            nested = scan * NESTED_SHARE > (stop - i) * window
            room = capacity - bounds[s, 2 * this + 1]
            if n_out + min(scan, (stop - i) * window) > cap_out or room < stop - i:
                progress[s] = i
                stats[0] = n_out
                return OUT_FULL if room >= stop - i else STORE_FULL
            this_head = bounds[s, 2 * this + 1] if reset else bounds[s, 2 * this]
            if not _room(
                run_seq, run_key, i, stop, keys, key, width,
                cells, cell_head, cell_count, s, this, this_head,
            ):  # fmt: skip
                progress[s] = i
                stats[0] = n_out
                return INDEX_FULL
            if reset:
                bounds[s, 0], bounds[s, 2] = bounds[s, 1], bounds[s, 3]
            bounds[s, LAST] = ts
            bounds[s, 2 * other] = head
            other_seq = store_seq[s, other]
            base = bases[this]
            for q in range(np.uint64(i), np.uint64(stop)):
                rows[q - i] = run_seq[q] - base
            if nested:
                stats[2] += 1
                stats[1] += (stop - i) * window
                if this == 0:
                    n_out = _probe_left(
                        candidate, match, left, rows, i, stop, stored_right, at, head, tail,
                        other_seq, hits, out, n_out, key,
                    )  # fmt: skip
                else:
                    n_out = _probe_right(
                        candidate, match, right, rows, i, stop, stored_left, at, head, tail,
                        other_seq, hits, out, n_out, key,
                    )  # fmt: skip
            else:
                for q in range(i, stop):
                    if this == 0:
                        n_out, seen = _probe_left_cells(
                            match, left, rows[q - i], stored_right, at, run_key[q], width,
                            cells, cell_head, cell_count, s, head, other_seq, out, n_out, q, key,
                        )  # fmt: skip
                    else:
                        n_out, seen = _probe_right_cells(
                            match, right, rows[q - i], stored_left, at, run_key[q], width,
                            cells, cell_head, cell_count, s, head, other_seq, out, n_out, q, key,
                        )  # fmt: skip
                    stats[1] += seen
            mask = cells.shape[3] - 1
            for q in range(i, stop):  # the group's own stores: not compared with it
                if run_seq[q] % keys == key:
                    t = bounds[s, 2 * this + 1]
                    store_ts[s, this, t] = ts
                    store_seq[s, this, t] = run_seq[q]
                    store_key[s, this, t] = run_key[q]
                    if this == 0:
                        _store_row(fill_left, at + t, rows[q - i])
                    else:
                        _store_row(fill_right, at + t, rows[q - i])
                    bounds[s, 2 * this + 1] = t + 1
                    c = _slot(run_key[q], width, wild)
                    e = (cell_head[s, this, c] + cell_count[s, this, c]) & mask
                    cells[s, this, c, e] = t
                    cell_count[s, this, c] += 1
            i = stop
        progress[s] = n
    stats[0] = n_out
    return DONE


@njit(nogil=True, cache=True)
def grid_loads(
    store_key: NDArray[np.float64], bounds: NDArray[np.int64], width: float, cells_n: int
) -> int:
    """The most live tuples any one cell of any store holds on a grid of ``cells_n`` cells.

    O(live tuples + slots x cells_n).
    """
    loads = np.zeros(cells_n + 1, np.int64)
    most = 0
    for s in range(store_key.shape[0]):
        for side in range(2):
            loads[:] = 0
            for t in range(bounds[s, 2 * side], bounds[s, 2 * side + 1]):
                c = _slot(store_key[s, side, t], width, cells_n)
                loads[c] += 1
            most = max(most, loads.max())
    return most


@njit(nogil=True, cache=True)
def grid_build(
    store_key: NDArray[np.float64],
    bounds: NDArray[np.int64],
    width: float,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
) -> None:
    """Fill an empty grid (``cell_count`` zero) with every store's live tuples, in order.

    The cells must have room (``grid_loads``). O(live tuples).
    """
    wild = cells.shape[2] - 1
    for s in range(store_key.shape[0]):
        for side in range(2):
            for t in range(bounds[s, 2 * side], bounds[s, 2 * side + 1]):
                c = _slot(store_key[s, side, t], width, wild)
                cells[s, side, c, cell_count[s, side, c]] = t
                cell_count[s, side, c] += 1


@njit(nogil=True, cache=True)
def scalejoin_indexed_run(
    slot_keys: NDArray[np.int64],
    keys: int,
    ws: int,
    wa: int,
    progress: NDArray[np.int64],
    run_ts: NDArray[np.int64],
    run_source: NDArray[np.int64],
    run_seq: NDArray[np.int64],
    run_key: NDArray[np.float64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    store_key: NDArray[np.float64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    width: float,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> int:
    """``_indexed_join`` with ScaleJoin's predicate; L reads (x, y), R reads (a, b)."""
    return _indexed_join(
        _scalejoin_match, _scalejoin_match, slot_keys, keys, ws, wa, progress, run_ts,
        run_source, run_seq, run_key, store_ts, store_seq, store_key, bounds, stored_left,
        stored_right, fill_left, fill_right, left, right, bases, width, cells, cell_head,
        cell_count, out, stats,
    )  # fmt: skip


@njit(nogil=True, cache=True)
def hedge_indexed_run(
    slot_keys: NDArray[np.int64],
    keys: int,
    ws: int,
    wa: int,
    progress: NDArray[np.int64],
    run_ts: NDArray[np.int64],
    run_source: NDArray[np.int64],
    run_seq: NDArray[np.int64],
    run_key: NDArray[np.float64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    store_key: NDArray[np.float64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    width: float,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> int:
    """``_indexed_join`` with hedge's predicate; each side reads (symbol, price, avg_price)."""
    return _indexed_join(
        _hedge_candidate, _hedge_match, slot_keys, keys, ws, wa, progress, run_ts,
        run_source, run_seq, run_key, store_ts, store_seq, store_key, bounds, stored_left,
        stored_right, fill_left, fill_right, left, right, bases, width, cells, cell_head,
        cell_count, out, stats,
    )  # fmt: skip
