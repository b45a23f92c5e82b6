"""An indexed 1T: the best simple single-thread band join with a grid over each window.

The nested-loop 1T (``onethread_scalejoin.py``) compares each tuple with the whole
opposite window. This one keeps, per side, a grid on the band's key: cell ``floor(key /
width)`` (hashed to ``CELLS`` cells), each cell a ring buffer of the side's row numbers
in arrival order, expired from its head (rows that left the window). A tuple reads the
cells within its band (``floor((k - width) / width)`` to ``floor((k + width) /
width)``) and tests each row there with the exact predicate; its matches are sorted by
row, so they come out in the window's order, as the nested loop writes them. ScaleJoin's
key is ``x`` / ``a`` (width 10); hedge's is ``log|ND|``, moved by 4096 for L trades
with ND > 0 and R trades with ND < 0 (so only opposite deviations meet), width 0.06; a
key that is not finite (ND = 0, a zero average) goes to a cell every tuple reads, and
such a tuple reads the whole window. No runtime, no keys, no groups: a plain program.

Run as a script it is a whole process, as ``onethread_scalejoin.py`` is::

    python benchmarks/onethread_indexed_scalejoin.py scalejoin --ws 10000 \\
        --input l.parquet --input r.parquet --output out.parquet
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit
from numpy.typing import NDArray
from onethread_scalejoin import Columns, Test, _hedge_match, _np, _scalejoin_match

from stretch.io import read_table, write_table

CELLS = 1 << 14
"""Grid cells per side (a power of two), plus one for keys that are not finite."""
SCALEJOIN_WIDTH = 10.0
HEDGE_WIDTH = 0.06
HEDGE_OFFSET = 4096.0
FULL = -1
"""``_indexed_1t``'s answer when a cell has no room: the caller doubles the cells."""


@njit(inline="always")
def _cell(key: float, width: float) -> int:
    if not np.isfinite(key):
        return CELLS
    return int(np.floor(key / width)) & (CELLS - 1)


@njit(inline="always")
def _probe(
    match: Test,
    is_left: bool,
    probe: Columns,
    q: int,
    key: float,
    width: float,
    other: Columns,
    other_key: NDArray[np.float64],
    head: int,
    end: int,
    cells: NDArray[np.int64],
    first: NDArray[np.int64],
    count: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
) -> tuple[int, int]:
    """Tuple ``q`` against the other side's rows ``[head, end)``; (n_out, rows tested)."""
    start = n_out
    seen = 0
    mask = cells.shape[1] - 1
    if not np.isfinite(key):
        for r in range(head, end):  # compared with every tuple, as the nested loop does
            hit = match(probe, q, other, r) if is_left else match(other, r, probe, q)
            if hit:
                out[0, n_out], out[1, n_out] = (q, r) if is_left else (r, q)
                n_out += 1
        return n_out, end - head
    low = int(np.floor((key - width) / width - 1e-9 * (abs(key / width) + 1.0)))
    high = int(np.floor((key + width) / width + 1e-9 * (abs(key / width) + 1.0)))
    for u in range(low, high + 2):
        c = CELLS if u == high + 1 else u & (CELLS - 1)
        h, n = first[c], count[c]
        while n > 0 and cells[c, h] < head:  # expired: left the window
            h = (h + 1) & mask
            n -= 1
        first[c], count[c] = h, n
        seen += n
        for e in range(n):
            r = cells[c, (h + e) & mask]
            hit = match(probe, q, other, r) if is_left else match(other, r, probe, q)
            if hit:
                out[0, n_out], out[1, n_out] = (q, r) if is_left else (r, q)
                n_out += 1
    if n_out - start > 1:  # in the window's order
        side = 1 if is_left else 0
        out[side, start:n_out] = np.sort(out[side, start:n_out])
    return n_out, seen


@njit(inline="always")
def _insert(
    row: int,
    key: float,
    width: float,
    head: int,
    cells: NDArray[np.int64],
    first: NDArray[np.int64],
    count: NDArray[np.int64],
) -> bool:
    """Append ``row`` to its cell (dropping the cell's expired head); False if full."""
    mask = cells.shape[1] - 1
    c = _cell(key, width)
    h, n = first[c], count[c]
    while n > 0 and cells[c, h] < head:
        h = (h + 1) & mask
        n -= 1
    first[c], count[c] = h, n
    if n == cells.shape[1]:
        return False
    cells[c, (h + n) & mask] = row
    count[c] = n + 1
    return True


@njit(inline="always")
def _indexed_1t(
    match: Test,
    left_ts: NDArray[np.int64],
    left: Columns,
    left_key: NDArray[np.float64],
    right_ts: NDArray[np.int64],
    right: Columns,
    right_key: NDArray[np.float64],
    ws: int,
    width: float,
    state: NDArray[np.int64],
    grids: tuple[NDArray[np.int64], NDArray[np.int64]],
    firsts: NDArray[np.int64],
    counts: NDArray[np.int64],
    out: NDArray[np.int64],
) -> int:
    """Matches as (L row, R row) in ``out``, resuming from ``state``; how many, or FULL.

    ``state``: (next L row, next R row, L window head, R window head, rows tested).
    Stops before a tuple whose matches might not fit in ``out`` (the caller takes them
    and calls again) or whose cell is full (``FULL``: the caller grows the cells).
    """
    n_left, n_right = left_ts.shape[0], right_ts.shape[0]
    i, k, head_left, head_right, tested = state
    n_out = 0
    cap = out.shape[1]
    status = 0
    while i < n_left or k < n_right:
        if k == n_right or (i < n_left and left_ts[i] <= right_ts[k]):
            ts = left_ts[i]
            while head_right < k and right_ts[head_right] + ws < ts:
                head_right += 1
            while head_left < i and left_ts[head_left] + ws < ts:
                head_left += 1
            if n_out + (k - head_right) > cap:
                break
            if not _insert(i, left_key[i], width, head_left, grids[0], firsts[0], counts[0]):
                status = FULL
                break
            n_out, seen = _probe(
                match, True, left, i, left_key[i], width, right, right_key, head_right, k,
                grids[1], firsts[1], counts[1], out, n_out,
            )  # fmt: skip
            tested += seen
            i += 1
        else:
            ts = right_ts[k]
            while head_left < i and left_ts[head_left] + ws < ts:
                head_left += 1
            while head_right < k and right_ts[head_right] + ws < ts:
                head_right += 1
            if n_out + (i - head_left) > cap:
                break
            if not _insert(k, right_key[k], width, head_right, grids[1], firsts[1], counts[1]):
                status = FULL
                break
            n_out, seen = _probe(
                match, False, right, k, right_key[k], width, left, left_key, head_left, i,
                grids[0], firsts[0], counts[0], out, n_out,
            )  # fmt: skip
            tested += seen
            k += 1
    state[0], state[1], state[2], state[3], state[4] = i, k, head_left, head_right, tested
    return FULL if status == FULL and n_out == 0 else n_out


@njit(nogil=True, cache=True)
def _scalejoin_indexed(
    left_ts: NDArray[np.int64],
    left: Columns,
    left_key: NDArray[np.float64],
    right_ts: NDArray[np.int64],
    right: Columns,
    right_key: NDArray[np.float64],
    ws: int,
    width: float,
    state: NDArray[np.int64],
    grids: tuple[NDArray[np.int64], NDArray[np.int64]],
    firsts: NDArray[np.int64],
    counts: NDArray[np.int64],
    out: NDArray[np.int64],
) -> int:
    return _indexed_1t(
        _scalejoin_match, left_ts, left, left_key, right_ts, right, right_key, ws, width,
        state, grids, firsts, counts, out,
    )  # fmt: skip


@njit(nogil=True, cache=True)
def _hedge_indexed(
    left_ts: NDArray[np.int64],
    left: Columns,
    left_key: NDArray[np.float64],
    right_ts: NDArray[np.int64],
    right: Columns,
    right_key: NDArray[np.float64],
    ws: int,
    width: float,
    state: NDArray[np.int64],
    grids: tuple[NDArray[np.int64], NDArray[np.int64]],
    firsts: NDArray[np.int64],
    counts: NDArray[np.int64],
    out: NDArray[np.int64],
) -> int:
    return _indexed_1t(
        _hedge_match, left_ts, left, left_key, right_ts, right, right_key, ws, width,
        state, grids, firsts, counts, out,
    )  # fmt: skip


def _hedge_keys(table: pa.Table, side: int) -> NDArray[np.float64]:
    price, avg = _np(table, "price"), _np(table, "avg_price")
    with np.errstate(all="ignore"):
        nd = (price - avg) / avg
        key = np.log(np.abs(nd))
    moved = nd > 0 if side == 0 else nd < 0
    return np.asarray(key + HEDGE_OFFSET * moved, dtype=np.float64)


def _grown(grid: NDArray[np.int64], first: NDArray[np.int64], count: NDArray[np.int64]) -> Any:
    """The cells with twice the room, each cell's ring unrolled to start at 0."""
    rows, room = grid.shape
    new = np.empty((rows, 2 * room), np.int64)
    for c in np.flatnonzero(count):
        ring = (first[c] + np.arange(count[c])) & (room - 1)
        new[c, : count[c]] = grid[c, ring]
    first[:] = 0
    return new


def join(operator: str, left: pa.Table, right: pa.Table, ws: int) -> tuple[pa.Table, int]:
    """The output table of ``operator`` (scalejoin or hedge) and the rows tested."""
    if operator == "scalejoin":
        run, width = _scalejoin_indexed, SCALEJOIN_WIDTH
        reads = (tuple(_np(left, c) for c in ("x", "y")), tuple(_np(right, c) for c in ("a", "b")))
        keys = (_np(left, "x").astype(np.float64), _np(right, "a").astype(np.float64))
        payload = [(0, "x"), (0, "y"), (1, "a"), (1, "b"), (1, "c"), (1, "d")]
        names = ["x", "y", "a", "b", "c", "d"]
    else:
        run, width = _hedge_indexed, HEDGE_WIDTH
        both = pc.dictionary_encode(pa.chunked_array([left["symbol"], right["symbol"]]))
        codes = np.concatenate([c.indices.to_numpy() for c in both.chunks]).astype(np.int64)
        left_codes, right_codes = codes[: left.num_rows], codes[left.num_rows :]
        reads = (
            (left_codes, _np(left, "price"), _np(left, "avg_price")),
            (right_codes, _np(right, "price"), _np(right, "avg_price")),
        )
        keys = (_hedge_keys(left, 0), _hedge_keys(right, 1))
        payload = [(0, "symbol"), (0, "price"), (1, "symbol"), (1, "price")]
        names = ["l_symbol", "l_price", "r_symbol", "r_price"]
    left_ts, right_ts = _np(left, "ts"), _np(right, "ts")
    state = np.zeros(5, np.int64)
    grids = [np.empty((CELLS + 1, 16), np.int64) for _ in range(2)]
    firsts = np.zeros((2, CELLS + 1), np.int64)
    counts = np.zeros((2, CELLS + 1), np.int64)
    out = np.empty((2, 1 << 16), np.int64)
    found = []
    while state[0] < left_ts.shape[0] or state[1] < right_ts.shape[0]:
        n_out = run(
            left_ts, reads[0], keys[0], right_ts, reads[1], keys[1], ws, width, state,
            (grids[0], grids[1]), firsts, counts, out,
        )  # fmt: skip
        if n_out == FULL:  # a cell without room: both sides' cells get twice the room
            grids = [_grown(grids[side], firsts[side], counts[side]) for side in (0, 1)]
        elif n_out:
            found.append(out[:, :n_out].copy())
        else:  # the next tuple's window is larger than out
            out = np.empty((2, 2 * out.shape[1]), np.int64)
    rows = np.concatenate(found, axis=1) if found else np.empty((2, 0), np.int64)
    ts = np.maximum(left_ts[rows[0]], right_ts[rows[1]])
    sides = (left, right)
    columns = {"ts": ts}
    for (side, column), name in zip(payload, names, strict=True):
        columns[name] = sides[side].column(column).take(pa.array(rows[side]))
    return pa.table(columns), int(state[4])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("operator", choices=["scalejoin", "hedge"])
    parser.add_argument("--input", action="append", required=True, help="L, then R (hedge: one)")
    parser.add_argument("--ws", type=int, default=10_000, help="the band in ms")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    start = time.perf_counter()
    tables = [read_table(path) for path in args.input]
    left, right = tables[0], tables[-1]
    table, tested = join(args.operator, left, right, args.ws)
    write_table(table, args.output)
    elapsed = time.perf_counter() - start
    print(f"{table.num_rows} rows, {tested:,} rows tested in {elapsed:.3f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
