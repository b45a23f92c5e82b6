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
(every key in one cell, a wide band), or the window is short, the group runs the nested
loop of ``_band_join``
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
    "NOT_FINITE",
    "band_cells",
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


NOT_FINITE = np.iinfo(np.int64).min
"""The cell of a key that is not finite (or too large for a cell number)."""
LARGEST_CELL = 2.0**61
"""Keys beyond this many widths from 0 count as not finite (cell numbers stay int64)."""


def band_cells(keys: NDArray[np.float64], width: float) -> NDArray[np.int64]:
    """Each key's cell and the first and last cells its probe reads, as rows (3, n).

    Cell ``floor(key / width)``; a probe of ``key`` reads ``floor((key - width) /
    width)`` to ``floor((key + width) / width)``, each widened by ``MARGIN`` so that no
    rounding hides a match (a fourth cell when the range ends on a cell's edge). A key
    that is not finite has the cell ``NOT_FINITE`` and an empty range (low > high).
    """
    with np.errstate(all="ignore"):
        scaled = keys / width
        finite = np.isfinite(scaled) & (np.abs(scaled) <= LARGEST_CELL)
        low = (keys - width) / width
        high = (keys + width) / width
        low = np.floor(low - (np.abs(low) * MARGIN + MARGIN))
        high = np.floor(high + (np.abs(high) * MARGIN + MARGIN))
    cells = np.empty((3, keys.shape[0]), dtype=np.int64)
    cells[0] = np.where(finite, np.floor(np.where(finite, scaled, 0.0)), 0.0)
    cells[1] = np.where(finite, low, 1.0)
    cells[2] = np.where(finite, high, 0.0)
    cells[0, ~finite] = NOT_FINITE
    return cells


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
def _slot(cell: int, wild: int, shift: int) -> int:
    """The grid cell (hashed) of a tuple of band cell ``cell``; ``wild`` if not finite.

    A grid cell spans ``2**shift`` band cells (``cell >> shift`` floors, negatives too).
    """
    return wild if cell == NOT_FINITE else (cell >> shift) & (wild - 1)


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
    grid_right: Columns,
    low: int,
    high: int,
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
    """L tuple ``q`` against R's grid of slot s; the next ``n_out`` and entries read.

    The predicate reads R's values in the grid's own columns (``grid_right``, a copy
    per cell entry), so a cell is scanned in memory order.
    """
    mask = cells.shape[3] - 1
    seen = 0
    for u in range(low, high + 2):
        c, h, n = _cell_entries(cells, cell_head, cell_count, s, 1, u, high, head)
        seen += n
        first = (s * cells.shape[2] + c) * cells.shape[3]
        for ring in range(h, h + n):
            e = ring & mask
            p = cells[s, 1, c, e]
            if match(left, row, grid_right, np.uint64(first + e)):
                n_out = _emit(out, n_out, q, key, other_seq[p], p)
    return n_out, seen


@njit(inline="always")
def _probe_right_cells(
    match: Match,
    right: Columns,
    row: int,
    grid_left: Columns,
    low: int,
    high: int,
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
    seen = 0
    for u in range(low, high + 2):
        c, h, n = _cell_entries(cells, cell_head, cell_count, s, 0, u, high, head)
        seen += n
        first = (s * cells.shape[2] + c) * cells.shape[3]
        for ring in range(h, h + n):
            e = ring & mask
            p = cells[s, 0, c, e]
            if match(grid_left, np.uint64(first + e), right, row):
                n_out = _emit(out, n_out, q, key, other_seq[p], p)
    return n_out, seen


@njit(inline="always")
def _group_candidates(
    run_cells: NDArray[np.int64],
    first: int,
    stop: int,
    cell_count: NDArray[np.int64],
    s: int,
    other: int,
    window: int,
    shift: int,
) -> int:
    """An upper bound of the entries the group's probes would read (a window if unserved)."""
    wild = cell_count.shape[2] - 1
    total = 0
    for q in range(first, stop):
        if run_cells[1, q] > run_cells[2, q]:  # not finite
            return (stop - first) * window
        low, high = run_cells[1, q] >> shift, run_cells[2, q] >> shift
        if high - low + 1 >= wild:  # wider than the grid
            return (stop - first) * window
        total += cell_count[s, other, wild]
        for u in range(low, high + 1):
            total += cell_count[s, other, u & (wild - 1)]
    return total


@njit(inline="always")
def _room(
    run_seq: NDArray[np.int64],
    run_cells: NDArray[np.int64],
    first: int,
    stop: int,
    keys: int,
    key: int,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    shift: int,
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
            c = _slot(run_cells[0, q], wild, shift)
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
    run_cells: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    store_cell: NDArray[np.int64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    grid: tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], int, int],
    grid_columns: tuple[Columns, Columns],
    fill_grid: tuple[Fill, Fill],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> int:
    """``_band_join._band_join`` with each side's store indexed by a grid on its key.

    The arguments are ``_band_join``'s, plus ``run_cells`` (each run tuple's cell and
    the first and last cells its probe reads: ``band_cells``), ``store_cell`` (the
    stored tuples' cells, beside ``store_ts``) and the grid: ``cells[s, side, c, e]``
    the store positions of cell c's ring buffer
    (``C + 1`` cells, the last the wild one; a capacity that is a power of two), its
    head ``cell_head[s, side, c]`` and length ``cell_count[s, side, c]``, the grid
    cells' ``shift`` over the band's cells, ``small_window`` (a key's window of at most
    that many tuples is compared by the nested loop), and a copy
    of the columns the predicate reads of each entry (``grid_left`` / ``grid_right``
    at ``(s * (C + 1) + c) * capacity + e``; ``fill_grid_left`` / ``fill_grid_right``
    pair them with the input columns). A match's
    fourth value is the partner's store position (stored order), not its rank. Returns
    ``DONE``, ``OUT_FULL``, ``STORE_FULL`` or ``INDEX_FULL`` (the caller rebuilds the
    grid with more room and calls again). ``stats`` holds the matches written, the
    comparisons made and the groups run as a nested loop.
    """
    cells, cell_head, cell_count, shift, small_window = grid
    grid_left, grid_right = grid_columns
    fill_grid_left, fill_grid_right = fill_grid
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
            scan = _group_candidates(run_cells, i, stop, cell_count, s, other, window, shift)
            nested = window <= small_window or scan * NESTED_SHARE > (stop - i) * window
            room = capacity - bounds[s, 2 * this + 1]
            if n_out + min(scan, (stop - i) * window) > cap_out or room < stop - i:
                progress[s] = i
                stats[0] = n_out
                return OUT_FULL if room >= stop - i else STORE_FULL
            this_head = bounds[s, 2 * this + 1] if reset else bounds[s, 2 * this]
            if not _room(
                run_seq, run_cells, i, stop, keys, key,
                cells, cell_head, cell_count, shift, s, this, this_head,
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
                            match, left, rows[q - i], grid_right, run_cells[1, q] >> shift,
                            run_cells[2, q] >> shift, cells, cell_head, cell_count, s, head,
                            other_seq, out, n_out, q, key,
                        )  # fmt: skip
                    else:
                        n_out, seen = _probe_right_cells(
                            match, right, rows[q - i], grid_left, run_cells[1, q] >> shift,
                            run_cells[2, q] >> shift, cells, cell_head, cell_count, s, head,
                            other_seq, out, n_out, q, key,
                        )  # fmt: skip
                    stats[1] += seen
            mask = cells.shape[3] - 1
            for q in range(i, stop):  # the group's own stores: not compared with it
                if run_seq[q] % keys == key:
                    t = bounds[s, 2 * this + 1]
                    store_ts[s, this, t] = ts
                    store_seq[s, this, t] = run_seq[q]
                    store_cell[s, this, t] = run_cells[0, q]
                    if this == 0:
                        _store_row(fill_left, at + t, rows[q - i])
                    else:
                        _store_row(fill_right, at + t, rows[q - i])
                    bounds[s, 2 * this + 1] = t + 1
                    c = _slot(run_cells[0, q], wild, shift)
                    e = (cell_head[s, this, c] + cell_count[s, this, c]) & mask
                    cells[s, this, c, e] = t
                    cell_count[s, this, c] += 1
                    entry = (s * cells.shape[2] + c) * cells.shape[3] + e
                    if this == 0:
                        _store_row(fill_grid_left, entry, rows[q - i])
                    else:
                        _store_row(fill_grid_right, entry, rows[q - i])
            i = stop
        progress[s] = n
    stats[0] = n_out
    return DONE


@njit(nogil=True, cache=True)
def grid_loads(
    store_cell: NDArray[np.int64], bounds: NDArray[np.int64], cells_n: int, shift: int
) -> int:
    """The most live tuples any one cell of any store holds on a grid of ``cells_n`` cells.

    O(live tuples + slots x cells_n).
    """
    loads = np.zeros(cells_n + 1, np.int64)
    most = 0
    for s in range(store_cell.shape[0]):
        for side in range(2):
            loads[:] = 0
            for t in range(bounds[s, 2 * side], bounds[s, 2 * side + 1]):
                c = _slot(store_cell[s, side, t], cells_n, shift)
                loads[c] += 1
            most = max(most, loads.max())
    return most


@njit(nogil=True, cache=True)
def grid_build(
    store_cell: NDArray[np.int64],
    bounds: NDArray[np.int64],
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    copy_left: Fill,
    copy_right: Fill,
    shift: int,
) -> None:
    """Fill an empty grid (``cell_count`` zero) with every store's live tuples, in order.

    The cells must have room (``grid_loads``). ``copy_left`` and ``copy_right`` pair
    each grid column with its store column. O(live tuples).
    """
    wild = cells.shape[2] - 1
    capacity = store_cell.shape[2]
    for s in range(store_cell.shape[0]):
        for side in range(2):
            for t in range(bounds[s, 2 * side], bounds[s, 2 * side + 1]):
                c = _slot(store_cell[s, side, t], wild, shift)
                e = cell_count[s, side, c]
                cells[s, side, c, e] = t
                cell_count[s, side, c] = e + 1
                entry = (s * cells.shape[2] + c) * cells.shape[3] + e
                if side == 0:
                    _store_row(copy_left, entry, s * capacity + t)
                else:
                    _store_row(copy_right, entry, s * capacity + t)


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
    run_cells: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    store_cell: NDArray[np.int64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    shift: int,
    small_window: int,
    grid_left: Columns,
    grid_right: Columns,
    fill_grid_left: Fill,
    fill_grid_right: Fill,
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> int:
    """``_indexed_join`` with ScaleJoin's predicate; L reads (x, y), R reads (a, b)."""
    return _indexed_join(
        _scalejoin_match, _scalejoin_match, slot_keys, keys, ws, wa, progress, run_ts,
        run_source, run_seq, run_cells, store_ts, store_seq, store_cell, bounds, stored_left,
        stored_right, fill_left, fill_right, left, right, bases,
        (cells, cell_head, cell_count, shift, small_window), (grid_left, grid_right),
        (fill_grid_left, fill_grid_right), out, stats,
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
    run_cells: NDArray[np.int64],
    store_ts: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    store_cell: NDArray[np.int64],
    bounds: NDArray[np.int64],
    stored_left: Columns,
    stored_right: Columns,
    fill_left: Fill,
    fill_right: Fill,
    left: Columns,
    right: Columns,
    bases: NDArray[np.int64],
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    shift: int,
    small_window: int,
    grid_left: Columns,
    grid_right: Columns,
    fill_grid_left: Fill,
    fill_grid_right: Fill,
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> int:
    """``_indexed_join`` with hedge's predicate; each side reads (symbol, price, avg_price)."""
    return _indexed_join(
        _hedge_candidate, _hedge_match, slot_keys, keys, ws, wa, progress, run_ts,
        run_source, run_seq, run_cells, store_ts, store_seq, store_cell, bounds, stored_left,
        stored_right, fill_left, fill_right, left, right, bases,
        (cells, cell_head, cell_count, shift, small_window), (grid_left, grid_right),
        (fill_grid_left, fill_grid_right), out, stats,
    )  # fmt: skip
