"""The band-join kernel through an index: a probe scans only the cells that can match.

A join that declares a band (``stretch.operators.kernels.Band``: a key per side such
that every matching pair has ``|key_L - key_R| <= width``) runs here instead of the
nested loop of ``_band_join``. Each key's store of each side stays as in ``_band_join``
(contiguous arrays, in insertion order between the bounds' head and tail); beside them,
one grid per side indexes the stores of all the keys an instance owns (its slab): cell
``floor(key / width)`` hashed to one of ``C`` cells (``C`` a power of two), each cell a
ring buffer of store indices (key slot and position) in arrival order, so expiry is
dropping the head of a cell. Every key sees every tuple of the run, so the keys'
windows expire together and a cell's expired entries are always at its head. A tuple
whose key is not finite goes to one more cell, the wild cell, that every probe scans; a
probe whose key is not finite scans the whole window.

One grid for the slab rather than one per key: a probe is compared with every key's
window (ScaleJoin's J+), so with K keys per-key grids made each probe visit K times as
many cells, each holding a K-th of the tuples, and the cost was in visiting cells. The
stores (the state the key-group partitioning moves) stay per key; the grid is derived
from them and rebuilt whenever a slab's keys change (at the epoch barrier's switch).

A probe of key ``k`` reads the cells ``floor((k - width) / width)`` to ``floor((k +
width) / width)`` (three, widened by a rounding margin, so a fourth on a cell edge) and
the wild cell, and tests each live entry with the join's exact predicate. It writes a
match as (tuple index, key, partner seq, store position): the caller sorts the matches
by tuple, key and store position, which is the order the reference emits them in
(``stretch.operators.joins``), then numbers them. The superset the cells return is the
band's business; the predicate decides.

When the cells a group of probes would scan hold more than a quarter of the window
(every key in one cell, a wide band), or the window is short, the group runs the nested
loop of ``_band_join`` over each key's store instead (its vectorized count then scan),
so skewed data costs what the nested loop costs. A cell without room (after dropping its
expired head) stops the kernel before the tuple (``INDEX_FULL``); the caller rebuilds
the grid with more room (``grid_build``), choosing ``C`` and the cells' capacity so the
grid stays within a bound of the stores' size. When a rebuild finds one cell holding
most of the window, the caller drops the grid and joins with ``_band_join``'s kernel
alone (no grid upkeep: never slower than the nested loop), noting the stored tuples'
cells (``store_cells``) so that a later rebuild can take the index up again.
"""

from __future__ import annotations

from typing import Any

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
    _group,
    _hedge_candidate,
    _hedge_match,
    _probe_left,
    _probe_right,
    _scalejoin_candidate,
    _scalejoin_match,
    _store_row,
)

__all__ = [
    "INDEX_FULL",
    "NOT_FINITE",
    "BLOCK_SHIFT",
    "band_cells",
    "grid_build",
    "grid_slots",
    "hedge_indexed_run",
    "run_band_cells",
    "scalejoin_indexed_run",
    "store_cells",
    "store_keys",
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


@njit(inline="always")
def _band_cell(key: float, width: float, cells: NDArray[np.int64], k: int) -> None:
    """Write ``key``'s cell and its probe's first and last cells at ``cells[:, k]``."""
    scaled = key / width
    if np.isfinite(scaled) and abs(scaled) <= LARGEST_CELL:
        low = (key - width) / width
        high = (key + width) / width
        cells[0, k] = np.int64(np.floor(scaled))
        cells[1, k] = np.int64(np.floor(low - (abs(low) * MARGIN + MARGIN)))
        cells[2, k] = np.int64(np.floor(high + (abs(high) * MARGIN + MARGIN)))
    else:
        cells[0, k], cells[1, k], cells[2, k] = NOT_FINITE, 1, 0


@njit(inline="always")
def _key_slots(slot_keys: NDArray[np.int64], keys: int) -> NDArray[np.int64]:
    """Each key's slot in a slab (``slot_keys[s]`` is slot s's key), -1 if it has none."""
    key_slot = np.full(keys, -1, np.int64)
    for s in range(slot_keys.shape[0]):
        key_slot[slot_keys[s]] = s
    return key_slot


BLOCK_SHIFT = 4
"""Under ``partition=band`` a key stores the tuples of blocks of ``2**BLOCK_SHIFT`` band
cells (``store_keys``): a probe reads three or four cells, so one block's key or two."""


@njit(nogil=True, cache=True)
def store_keys(
    seq: NDArray[np.int64], cell: NDArray[np.int64], keys: int, by_band: bool
) -> NDArray[np.int64]:
    """The key that stores each tuple: round robin, or by its band's block.

    ``seq % keys`` (ScaleJoin's round robin) unless ``by_band``; then the block of the
    tuple's band cell ``cell`` (``cell >> BLOCK_SHIFT``, floored) modulo ``keys``, and
    round robin for a cell that is not finite, which every probe reads wherever it is
    stored. ``cell`` is read only ``by_band``.
    """
    found = np.empty(seq.shape[0], dtype=np.int64)
    for k in range(seq.shape[0]):
        if by_band and cell[k] != NOT_FINITE:
            found[k] = (cell[k] >> BLOCK_SHIFT) % keys
        else:
            found[k] = seq[k] % keys
    return found


@njit(inline="always")
def _probes_here(
    run_cells: NDArray[np.int64],
    q: int,
    key_slot: NDArray[np.int64],
    keys: int,
    block: int,
    wild_count: int,
) -> bool:
    """Whether run tuple q's probe can find a partner in a slab (``key_slot``'s keys).

    Always, unless the keys store by block (``block``: ``BLOCK_SHIFT``; -1 for round
    robin, where every key holds tuples of every cell), the probe's range is finite and
    the slab's wild cell (``wild_count`` entries) is empty: then only if the slab owns
    the key of a block the probe's cells fall in.
    """
    low, high = run_cells[1, q], run_cells[2, q]
    if block < 0 or wild_count > 0 or low > high:
        return True
    first, last = low >> block, high >> block
    if last - first + 1 >= keys:
        return True
    for b in range(first, last + 1):  # noqa: SIM110 - Numba compiles no generator into any()
        if key_slot[b % keys] >= 0:
            return True
    return False


@njit(nogil=True, cache=True)
def band_cells(keys: NDArray[np.float64], width: float) -> NDArray[np.int64]:
    """Each key's cell and the first and last cells its probe reads, as rows (3, n).

    Cell ``floor(key / width)``; a probe of ``key`` reads ``floor((key - width) /
    width)`` to ``floor((key + width) / width)``, each widened by ``MARGIN`` so that no
    rounding hides a match (a fourth cell when the range ends on a cell's edge). A key
    that is not finite has the cell ``NOT_FINITE`` and an empty range (low > high).
    """
    cells = np.empty((3, keys.shape[0]), dtype=np.int64)
    for k in range(keys.shape[0]):
        _band_cell(keys[k], width, cells, k)
    return cells


@njit(nogil=True, cache=True)
def run_band_cells(
    source: NDArray[np.int64],
    seq: NDArray[np.int64],
    bases: NDArray[np.int64],
    left: NDArray[Any],
    right: NDArray[Any],
    width: float,
) -> NDArray[np.int64]:
    """``band_cells`` of run tuples whose key is a column's value (a plain ``Band``).

    Tuple k of source ``source[k]`` (0: L) is row ``seq[k] - bases[side]`` of ``left``
    or ``right``, the band's column of that side: one pass, no gathered copies.
    """
    cells = np.empty((3, source.shape[0]), dtype=np.int64)
    for k in range(source.shape[0]):
        if source[k] == 0:
            key = np.float64(left[seq[k] - bases[0]])
        else:
            key = np.float64(right[seq[k] - bases[1]])
        _band_cell(key, width, cells, k)
    return cells


@njit(inline="always")
def _entry(g: int, capacity: int) -> tuple[int, int]:
    """A cell entry ``s * capacity + p`` as its key slot s and store position p."""
    s = g // capacity
    return s, g - s * capacity


@njit(inline="always")
def _emit_entry(
    out: NDArray[np.int64],
    n_out: int,
    q: int,
    g: int,
    side: int,
    slot_keys: NDArray[np.int64],
    store_seq: NDArray[np.int64],
) -> int:
    """``_emit`` the match of run tuple q with cell entry g of ``side``; the next n."""
    s, p = _entry(g, store_seq.shape[2])
    return _emit(out, n_out, q, slot_keys[s], store_seq[s, side, p], p)


@njit(inline="always")
def _purge(
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    side: int,
    c: int,
    bounds: NDArray[np.int64],
    capacity: int,
) -> None:
    """Drop cell ``c``'s expired entries (below their key's store head), from its head.

    Every key of the slab sees every tuple of the run, so the keys' windows expire (and
    restart) together and a cell's expired entries are always at its head.
    """
    mask = cells.shape[2] - 1
    h, n = cell_head[side, c], cell_count[side, c]
    while n > 0:
        s, p = _entry(cells[side, c, h], capacity)
        if p >= bounds[s, 2 * side]:
            break
        h = (h + 1) & mask
        n -= 1
    cell_head[side, c], cell_count[side, c] = h, n


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
    other: int,
    u: int,
    high: int,
    bounds: NDArray[np.int64],
    capacity: int,
) -> tuple[int, int, int]:
    """Cell ``u`` of a probe's range (``high + 1``: the wild cell), purged: (c, head, n)."""
    wild = cells.shape[1] - 1
    c = wild if u == high + 1 else u & (wild - 1)
    _purge(cells, cell_head, cell_count, other, c, bounds, capacity)
    return c, cell_head[other, c], cell_count[other, c]


@njit(inline="always")
def _probe_left_cells(
    candidate: Match,
    match: Match,
    left: Columns,
    row: int,
    grid_right: Columns,
    low: int,
    high: int,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    bounds: NDArray[np.int64],
    slot_keys: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
    q: int,
) -> tuple[int, int]:
    """L tuple ``q`` against R's grid; the next ``n_out`` and the entries read.

    The predicate reads R's values in the grid's own columns (``grid_right``, a copy
    per cell entry), so a cell is scanned in memory order, as the nested loop scans a
    block: a branch-free count of ``candidate`` over each contiguous part of the ring (a
    vector loop), then, only where it found one, a scan with the exact ``match``. An
    entry is a store index ``s * capacity + p`` (key slot s, store position p), decoded
    for a match only.
    """
    size = cells.shape[2]
    capacity = store_seq.shape[2]
    seen = 0
    for u in range(low, high + 2):
        c, h, n = _cell_entries(cells, cell_head, cell_count, 1, u, high, bounds, capacity)
        seen += n
        first = c * size
        for lo, hi in ((h, min(h + n, size)), (0, max(0, h + n - size))):
            count = 0
            for r in range(np.uint64(first + lo), np.uint64(first + hi)):
                count += candidate(left, row, grid_right, r)
            if count == 0:
                continue
            for e in range(lo, hi):
                if match(left, row, grid_right, np.uint64(first + e)):
                    n_out = _emit_entry(out, n_out, q, cells[1, c, e], 1, slot_keys, store_seq)
    return n_out, seen


@njit(inline="always")
def _probe_right_cells(
    candidate: Match,
    match: Match,
    right: Columns,
    row: int,
    grid_left: Columns,
    low: int,
    high: int,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    bounds: NDArray[np.int64],
    slot_keys: NDArray[np.int64],
    store_seq: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
    q: int,
) -> tuple[int, int]:
    """``_probe_left_cells`` for R tuple ``q`` against L's grid."""
    size = cells.shape[2]
    capacity = store_seq.shape[2]
    seen = 0
    for u in range(low, high + 2):
        c, h, n = _cell_entries(cells, cell_head, cell_count, 0, u, high, bounds, capacity)
        seen += n
        first = c * size
        for lo, hi in ((h, min(h + n, size)), (0, max(0, h + n - size))):
            count = 0
            for r in range(np.uint64(first + lo), np.uint64(first + hi)):
                count += candidate(grid_left, r, right, row)
            if count == 0:
                continue
            for e in range(lo, hi):
                if match(grid_left, np.uint64(first + e), right, row):
                    n_out = _emit_entry(out, n_out, q, cells[0, c, e], 0, slot_keys, store_seq)
    return n_out, seen


@njit(inline="always")
def _group_candidates(
    run_cells: NDArray[np.int64],
    first: int,
    stop: int,
    cell_count: NDArray[np.int64],
    other: int,
    window: int,
    shift: int,
    probing: NDArray[np.bool_],
) -> int:
    """An upper bound of the entries the group's probes would read (a window if unserved).

    ``probing[q - first]``: whether run tuple q probes this slab (``_probes_here``).
    """
    wild = cell_count.shape[1] - 1
    total = 0
    for q in range(first, stop):
        if not probing[q - first]:
            continue
        if run_cells[1, q] > run_cells[2, q]:  # not finite
            return (stop - first) * window
        low, high = run_cells[1, q] >> shift, run_cells[2, q] >> shift
        if high - low + 1 >= wild:  # wider than the grid
            return (stop - first) * window
        total += cell_count[other, wild]
        for u in range(low, high + 1):
            total += cell_count[other, u & (wild - 1)]
    return total


@njit(inline="always")
def _room(
    stored: NDArray[np.int64],
    run_cells: NDArray[np.int64],
    first: int,
    stop: int,
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    shift: int,
    this: int,
    bounds: NDArray[np.int64],
    capacity: int,
) -> bool:
    """Whether each cell the group stores a tuple in has room for all the group stores.

    ``stored[q - first]`` is the slot that stores run tuple q (-1: a key not owned).
    """
    wild = cells.shape[1] - 1
    cap = cells.shape[2]
    stores = 0
    for q in range(first, stop):
        stores += stored[q - first] >= 0
    for q in range(first, stop):
        if stored[q - first] >= 0:
            c = _slot(run_cells[0, q], wild, shift)
            _purge(cells, cell_head, cell_count, this, c, bounds, capacity)
            if cell_count[this, c] + stores > cap:
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
    run_key: NDArray[np.int64],
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
    grid: tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], int, int, int],
    grid_columns: tuple[Columns, Columns],
    fill_grid: tuple[Fill, Fill],
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> int:
    """``_band_join._band_join`` with one grid per side over the stores of all its keys.

    The arguments are ``_band_join``'s, plus ``run_cells`` (each run tuple's cell and
    the first and last cells its probe reads: ``band_cells``), ``run_key`` (the key that
    stores each run tuple: ``store_keys``), ``store_cell`` (the
    stored tuples' cells, beside ``store_ts``) and the grid, one per side shared by the
    slab's keys: ``cells[side, c, e]`` the store indices ``s * capacity + p`` of cell c's
    ring buffer (``C + 1`` cells, the last the wild one; a capacity that is a power of
    two), its head ``cell_head[side, c]`` and length ``cell_count[side, c]``, the grid
    cells' ``shift`` over the band's cells, ``small_window`` (a window of at most that
    many tuples, all keys together, is compared by the nested loop), ``block``
    (``BLOCK_SHIFT`` when the keys store by block: a probe whose blocks' keys the slab does
    not own is skipped, ``_probes_here``; -1 for round robin), and a copy of the
    columns the predicate reads of each entry (``grid_left`` / ``grid_right`` at ``c *
    cells.shape[2] + e``; ``fill_grid_left`` / ``fill_grid_right`` pair them with the input
    columns).

    Unlike ``_band_join``, which walks the run once per key, this walks it once: a probe
    reads its cells once for all the slab's keys, and each match carries its key. A
    match's fourth value is the partner's store position (stored order), not its rank.
    Returns ``DONE``, ``OUT_FULL``, ``STORE_FULL`` or ``INDEX_FULL`` (the caller rebuilds
    the grid with more room and calls again); ``progress`` (every entry) is the next run
    tuple. ``stats`` holds the matches written, the comparisons made and the groups run
    as a nested loop.
    """
    cells, cell_head, cell_count, shift, small_window, block = grid
    grid_left, grid_right = grid_columns
    fill_grid_left, fill_grid_right = fill_grid
    n_out = stats[0]
    compared = nested_groups = 0  # counted here, added to stats on return
    cap_out = out.shape[1]
    capacity = store_ts.shape[2]
    wild = cells.shape[1] - 1
    mask = cells.shape[2] - 1
    n = run_ts.shape[0]
    slots = slot_keys.shape[0]
    if slots == 0:
        return DONE
    key_slot = _key_slots(slot_keys, keys)
    hits = np.empty((GROUP, capacity // BLOCK + 1), np.int64)
    rows = np.empty(GROUP, np.int64)
    stored = np.empty(GROUP, np.int64)
    probing = np.empty(GROUP, np.bool_)
    i = progress[0]
    while i < n:
        this = 0 if run_source[i] == 0 else 1
        other = 1 - this
        ts = run_ts[i]
        stop, earliest = _group(run_ts, run_source, i, ws, wa)
        # Every key's window before the group (restarted, expired); safe to redo if the
        # kernel stops before the group below.
        window = 0
        for s in range(slots):
            if earliest > bounds[s, LAST]:
                bounds[s, 0], bounds[s, 2] = bounds[s, 1], bounds[s, 3]
            bounds[s, LAST] = ts
            head, tail = bounds[s, 2 * other], bounds[s, 2 * other + 1]
            while head < tail and store_ts[s, other, head] + ws < ts:
                head += 1
            bounds[s, 2 * other] = head
            window += tail - head
        full = False
        wild_count = cell_count[other, wild]
        for q in range(i, stop):
            s = key_slot[run_key[q]]
            stored[q - i] = s
            full |= s >= 0 and bounds[s, 2 * this + 1] + (stop - i) > capacity
            probing[q - i] = _probes_here(run_cells, q, key_slot, keys, block, wild_count)
        scan = _group_candidates(run_cells, i, stop, cell_count, other, window, shift, probing)
        nested = window <= small_window or scan * NESTED_SHARE > (stop - i) * window
        if full or n_out + min(scan, (stop - i) * window) > cap_out:
            progress[:] = i
            stats[0] = n_out
            stats[1] += compared
            stats[2] += nested_groups
            return STORE_FULL if full else OUT_FULL
        if not _room(
            stored, run_cells, i, stop, cells, cell_head, cell_count, shift, this, bounds,
            capacity,
        ):  # fmt: skip
            progress[:] = i
            stats[0] = n_out
            stats[1] += compared
            stats[2] += nested_groups
            return INDEX_FULL
        base = bases[this]
        for q in range(np.uint64(i), np.uint64(stop)):
            rows[q - i] = run_seq[q] - base
        if nested:
            nested_groups += 1
            compared += (stop - i) * window
            for s in range(slots):
                head, tail = bounds[s, 2 * other], bounds[s, 2 * other + 1]
                at = s * capacity
                if this == 0:
                    n_out = _probe_left(
                        candidate, match, left, rows, i, stop, stored_right, at, head, tail,
                        store_seq[s, 1], hits, out, n_out, slot_keys[s],
                    )  # fmt: skip
                else:
                    n_out = _probe_right(
                        candidate, match, right, rows, i, stop, stored_left, at, head, tail,
                        store_seq[s, 0], hits, out, n_out, slot_keys[s],
                    )  # fmt: skip
        else:
            for q in range(i, stop):
                if not probing[q - i]:
                    continue
                low, high = run_cells[1, q] >> shift, run_cells[2, q] >> shift
                if this == 0:
                    n_out, seen = _probe_left_cells(
                        candidate, match, left, rows[q - i], grid_right, low, high, cells,
                        cell_head, cell_count, bounds, slot_keys, store_seq, out, n_out, q,
                    )  # fmt: skip
                else:
                    n_out, seen = _probe_right_cells(
                        candidate, match, right, rows[q - i], grid_left, low, high, cells,
                        cell_head, cell_count, bounds, slot_keys, store_seq, out, n_out, q,
                    )  # fmt: skip
                compared += seen
        for q in range(i, stop):  # the group's own stores: not compared with it
            s = stored[q - i]
            if s < 0:
                continue
            t = bounds[s, 2 * this + 1]
            store_ts[s, this, t] = ts
            store_seq[s, this, t] = run_seq[q]
            store_cell[s, this, t] = run_cells[0, q]
            if this == 0:
                _store_row(fill_left, s * capacity + t, rows[q - i])
            else:
                _store_row(fill_right, s * capacity + t, rows[q - i])
            bounds[s, 2 * this + 1] = t + 1
            c = _slot(run_cells[0, q], wild, shift)
            e = (cell_head[this, c] + cell_count[this, c]) & mask
            cells[this, c, e] = s * capacity + t
            cell_count[this, c] += 1
            if this == 0:
                _store_row(fill_grid_left, c * cells.shape[2] + e, rows[q - i])
            else:
                _store_row(fill_grid_right, c * cells.shape[2] + e, rows[q - i])
        i = stop
    progress[:] = n
    stats[0] = n_out
    stats[1] += compared
    stats[2] += nested_groups
    return DONE


@njit(nogil=True, cache=True)
def grid_slots(cell: NDArray[np.int64], cells_n: int, shift: int) -> NDArray[np.int64]:
    """The grid cell of each band cell on ``cells_n`` cells (``cells_n``: not finite)."""
    slots = np.empty(cell.shape[0], np.int64)
    for k in range(cell.shape[0]):
        slots[k] = _slot(cell[k], cells_n, shift)
    return slots


@njit(nogil=True, cache=True)
def grid_build(
    entries: tuple[NDArray[np.int64], NDArray[np.int64]],
    slots: tuple[NDArray[np.int64], NDArray[np.int64]],
    cells: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    copy_left: Fill,
    copy_right: Fill,
) -> None:
    """Fill an empty grid (``cell_count`` zero) with each side's ``entries``, in order.

    ``entries[side]`` are store indices ``s * capacity + p`` in arrival order and
    ``slots[side]`` their grid cells; the cells must have room. ``copy_left`` and
    ``copy_right`` pair each grid column with its store column. O(entries).
    """
    width = cells.shape[2]
    for side in range(2):
        for k in range(entries[side].shape[0]):
            c = slots[side][k]
            e = cell_count[side, c]
            cells[side, c, e] = entries[side][k]
            cell_count[side, c] = e + 1
            if side == 0:
                _store_row(copy_left, c * width + e, entries[side][k])
            else:
                _store_row(copy_right, c * width + e, entries[side][k])


@njit(nogil=True, cache=True)
def grid_compact(
    cells: NDArray[np.int64],
    cell_head: NDArray[np.int64],
    cell_count: NDArray[np.int64],
    old_capacity: int,
    new_capacity: int,
    old_bounds: NDArray[np.int64],
) -> None:
    """Keep a grid in step with its stores compacted into slots of ``new_capacity``.

    A compaction (``_Slab.gather`` of a slab into itself) copies each slot's live tuples,
    positions ``old_bounds[s, 2 * side]`` to ``old_bounds[s, 2 * side + 1]`` of
    ``old_capacity``, to the start of the slot. Each cell first drops its expired entries
    (``_purge``: they are at its head), then each entry ``s * old_capacity + p`` becomes
    ``s * new_capacity + p - head`` where it lies, so the entries' copies of the
    predicate's columns stay as they are. O(entries), no sort: each cell then holds what
    ``grid_build`` would put in it over the compacted stores, in that order.
    """
    mask = cells.shape[2] - 1
    for side in range(2):
        for c in range(cells.shape[1]):
            _purge(cells, cell_head, cell_count, side, c, old_bounds, old_capacity)
            for i in range(cell_count[side, c]):
                e = (cell_head[side, c] + i) & mask
                s, p = _entry(cells[side, c, e], old_capacity)
                cells[side, c, e] = s * new_capacity + p - old_bounds[s, 2 * side]


@njit(nogil=True, cache=True)
def store_cells(
    slot_keys: NDArray[np.int64],
    keys: int,
    run_source: NDArray[np.int64],
    run_key: NDArray[np.int64],
    run_cells: NDArray[np.int64],
    before: NDArray[np.int64],
    after: NDArray[np.int64],
    tails: NDArray[np.int64],
    store_cell: NDArray[np.int64],
) -> None:
    """Write the band cells of the tuples a call of the nested kernel stored.

    Slot s went from run tuple ``before[s]`` to ``after[s]`` (its ``progress``), storing
    in run order each tuple of its key (``run_key``) at its side's tail, the tails
    being ``tails[s]`` (L, R) before the call; ``run_cells[0]`` holds each run tuple's
    cell. The grid rebuilt over the stores later (``grid_build``) reads them.
    """
    slots = slot_keys.shape[0]
    if slots == 0:
        return
    key_slot = _key_slots(slot_keys, keys)
    at = tails.copy()
    for q in range(before.min(), after.max()):
        s = key_slot[run_key[q]]
        if s >= 0 and before[s] <= q < after[s]:
            side = 0 if run_source[q] == 0 else 1
            store_cell[s, side, at[s, side]] = run_cells[0, q]
            at[s, side] += 1


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
    run_key: NDArray[np.int64],
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
    block: int,
    grid_left: Columns,
    grid_right: Columns,
    fill_grid_left: Fill,
    fill_grid_right: Fill,
    out: NDArray[np.int64],
    stats: NDArray[np.int64],
) -> int:
    """``_indexed_join`` with ScaleJoin's predicate; L reads (x, y), R reads (a, b)."""
    return _indexed_join(
        _scalejoin_candidate, _scalejoin_match, slot_keys, keys, ws, wa, progress, run_ts,
        run_source, run_seq, run_key, run_cells, store_ts, store_seq, store_cell, bounds,
        stored_left, stored_right, fill_left, fill_right, left, right, bases,
        (cells, cell_head, cell_count, shift, small_window, block), (grid_left, grid_right),
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
    run_key: NDArray[np.int64],
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
    block: int,
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
        run_source, run_seq, run_key, run_cells, store_ts, store_seq, store_cell, bounds,
        stored_left, stored_right, fill_left, fill_right, left, right, bases,
        (cells, cell_head, cell_count, shift, small_window, block), (grid_left, grid_right),
        (fill_grid_left, fill_grid_right), out, stats,
    )  # fmt: skip
