"""1T of section 8.3: the best simple single-thread program for ScaleJoin (or hedge).

No runtime: read the two input files, merge the two ``ts``-sorted streams in the total
order (ts, then L before R), and for each tuple compare it with the opposite side's
window, which is a contiguous slice of that side's own columns (``[head, i)``: the
tuples already arrived, less those more than WS older, dropped by moving ``head``). The
predicate is written into the loop. Matches are written to an output file with the
columns ``stretch replay`` writes (``ts`` = the later tuple's). Both ScaleJoin's and
hedge's predicates are here; hedge feeds one trade file as both L and R.

The comparison loop is in the shape the compiler vectorizes: the window is cut into
blocks of ``BLOCK`` tuples; a branch-free count of the block's candidates (``&``, no
``and``; indices unsigned, so Numba adds no wraparound select and the loads stay
contiguous) runs as SIMD code, and only a block with a candidate is scanned again, in
order, with the exact predicate, writing each pair. The consecutive tuples of one side
that share a ts (10 per ms per stream in the section 8.3 data) share a window, so each
block is counted for all of them while it is in L1: the window (1.6 MB per side here)
is streamed from memory once per group instead of once per tuple. For ScaleJoin the count is the
predicate itself; hedge's exact predicate divides (and raises on a zero average, as the
Python reference does), so its count uses a division-free test that holds for every
matching pair (a superset) and the scan decides.

Run as a script it is a whole process that ``stretch replay`` can be timed against on
the same files::

    python benchmarks/onethread_scalejoin.py scalejoin --ws 10000 \\
        --input l.parquet --input r.parquet --output out.parquet

``bench_scalejoin.py`` also imports :func:`join` to run it in its own process.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numba import njit
from numpy.typing import NDArray

from stretch.io import read_table, write_table

Columns = tuple[NDArray[Any], ...]
Test = Callable[[Columns, Any, Columns, Any], bool]

BLOCK = 256
"""Tuples of the opposite window counted at once before any is written."""
GROUP = 32
"""The most probes of one side and one ts compared with a block while it is in L1."""


@njit(inline="always")
def _scalejoin_match(left: Columns, l: Any, right: Columns, r: Any) -> bool:
    return bool((abs(left[0][l] - right[0][r]) <= 10) & (abs(left[1][l] - right[1][r]) <= 10))


@njit(inline="always")
def _hedge_candidate(left: Columns, l: Any, right: Columns, r: Any) -> bool:
    """Branch-free, no division: true for every pair ``_hedge_match`` accepts or raises on.

    The ratio ``nd_r / nd_l`` is ``cross / scale`` below; within [-1.05, -0.95] means
    ``|cross + scale| <= 0.05 |scale|`` (0.06 leaves room for rounding). Zero averages,
    overflow and underflow are candidates too, for the exact predicate to decide.
    """
    d_left = left[1][l] - left[2][l]
    d_right = right[1][r] - right[2][r]
    cross = d_right * left[2][l]
    scale = right[2][r] * d_left
    near = abs(cross + scale) <= 0.06 * abs(scale)
    odd = (abs(cross) >= np.inf) | (abs(scale) >= np.inf) | (abs(scale) < 1e-300)
    return bool((left[0][l] != right[0][r]) & (near | odd | (left[2][l] == 0)))


@njit(inline="always")
def _hedge_match(left: Columns, l: Any, right: Columns, r: Any) -> bool:
    if left[0][l] == right[0][r]:
        return False
    nd_left = (left[1][l] - left[2][l]) / left[2][l]
    if nd_left == 0:
        return False
    nd_right = (right[1][r] - right[2][r]) / right[2][r]
    return bool(-1.05 <= nd_right / nd_left <= -0.95)


@njit(inline="always")
def _probe_left(
    candidate: Test,
    match: Test,
    left: Columns,
    first: int,
    stop: int,
    right: Columns,
    head: int,
    end: int,
    hits: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
) -> int:
    """L tuples ``[first, stop)`` (one ts) against R's window ``[head, end)``; next n_out.

    Block by block, every probe of the group counts its candidates while the block is in
    L1; then each probe in turn scans its blocks holding a candidate, in window order.
    """
    for block in range(head, end, BLOCK):
        last = np.uint64(min(block + BLOCK, end))
        for q in range(first, stop):
            count = 0
            for r in range(np.uint64(block), last):
                count += candidate(left, q, right, r)
            hits[q - first, (block - head) // BLOCK] = count
    for q in range(first, stop):
        for block in range(head, end, BLOCK):
            if hits[q - first, (block - head) // BLOCK]:
                for r in range(np.uint64(block), np.uint64(min(block + BLOCK, end))):
                    if match(left, q, right, r):
                        out[0, n_out] = q
                        out[1, n_out] = r
                        n_out += 1
    return n_out


@njit(inline="always")
def _probe_right(
    candidate: Test,
    match: Test,
    right: Columns,
    first: int,
    stop: int,
    left: Columns,
    head: int,
    end: int,
    hits: NDArray[np.int64],
    out: NDArray[np.int64],
    n_out: int,
) -> int:
    """``_probe_left`` for R tuples ``[first, stop)`` against L's window."""
    for block in range(head, end, BLOCK):
        last = np.uint64(min(block + BLOCK, end))
        for q in range(first, stop):
            count = 0
            for l in range(np.uint64(block), last):
                count += candidate(left, l, right, q)
            hits[q - first, (block - head) // BLOCK] = count
    for q in range(first, stop):
        for block in range(head, end, BLOCK):
            if hits[q - first, (block - head) // BLOCK]:
                for l in range(np.uint64(block), np.uint64(min(block + BLOCK, end))):
                    if match(left, l, right, q):
                        out[0, n_out] = l
                        out[1, n_out] = q
                        n_out += 1
    return n_out


@njit(inline="always")
def _merge_join(
    candidate: Test,
    match: Test,
    left_ts: NDArray[np.int64],
    left: Columns,
    right_ts: NDArray[np.int64],
    right: Columns,
    ws: int,
    state: NDArray[np.int64],
    hits: NDArray[np.int64],
    out: NDArray[np.int64],
) -> int:
    """Matches as (L row, R row) in ``out``; returns how many, resuming from ``state``.

    ``state`` holds (next L row, next R row, L window head, R window head, comparisons).
    The consecutive tuples of one side with one ts (at most ``GROUP``) share a window
    and are compared with it together. Stops before a group whose matches might not fit
    in ``out``: the caller takes the matches (or grows ``out`` if there are none) and
    calls again until ``state[:2]`` reaches the ends of both streams.
    """
    n_left, n_right = left_ts.shape[0], right_ts.shape[0]
    i, k, head_left, head_right, comparisons = state
    n_out = 0
    cap = out.shape[1]
    while i < n_left or k < n_right:
        if k == n_right or (i < n_left and left_ts[i] <= right_ts[k]):
            ts = left_ts[i]
            while head_right < k and right_ts[head_right] + ws < ts:
                head_right += 1
            stop = i + 1
            while stop < n_left and stop - i < GROUP and left_ts[stop] == ts:
                stop += 1
            if n_out + (stop - i) * (k - head_right) > cap:
                break
            comparisons += (stop - i) * (k - head_right)
            n_out = _probe_left(
                candidate, match, left, i, stop, right, head_right, k, hits, out, n_out
            )
            i = stop
        else:
            ts = right_ts[k]
            while head_left < i and left_ts[head_left] + ws < ts:
                head_left += 1
            stop = k + 1
            while stop < n_right and stop - k < GROUP and right_ts[stop] == ts:
                stop += 1
            if n_out + (stop - k) * (i - head_left) > cap:
                break
            comparisons += (stop - k) * (i - head_left)
            n_out = _probe_right(
                candidate, match, right, k, stop, left, head_left, i, hits, out, n_out
            )
            k = stop
    state[0], state[1], state[2], state[3], state[4] = i, k, head_left, head_right, comparisons
    return n_out


@njit(nogil=True, cache=True)
def _scalejoin_1t(
    left_ts: NDArray[np.int64],
    left: Columns,
    right_ts: NDArray[np.int64],
    right: Columns,
    ws: int,
    state: NDArray[np.int64],
    hits: NDArray[np.int64],
    out: NDArray[np.int64],
) -> int:
    return _merge_join(
        _scalejoin_match, _scalejoin_match, left_ts, left, right_ts, right, ws, state, hits, out
    )


@njit(nogil=True, cache=True)
def _hedge_1t(
    left_ts: NDArray[np.int64],
    left: Columns,
    right_ts: NDArray[np.int64],
    right: Columns,
    ws: int,
    state: NDArray[np.int64],
    hits: NDArray[np.int64],
    out: NDArray[np.int64],
) -> int:
    return _merge_join(
        _hedge_candidate, _hedge_match, left_ts, left, right_ts, right, ws, state, hits, out
    )


def _np(table: pa.Table, name: str) -> NDArray[Any]:
    return np.ascontiguousarray(table.column(name).to_numpy())


def join(operator: str, left: pa.Table, right: pa.Table, ws: int) -> tuple[pa.Table, int]:
    """The output table of ``operator`` (scalejoin or hedge) and the comparisons made."""
    if operator == "scalejoin":
        run = _scalejoin_1t
        reads = (tuple(_np(left, c) for c in ("x", "y")), tuple(_np(right, c) for c in ("a", "b")))
        payload = [(0, "x"), (0, "y"), (1, "a"), (1, "b"), (1, "c"), (1, "d")]
        names = ["x", "y", "a", "b", "c", "d"]
    else:
        run = _hedge_1t
        both = pc.dictionary_encode(pa.chunked_array([left["symbol"], right["symbol"]]))
        codes = np.concatenate([c.indices.to_numpy() for c in both.chunks]).astype(np.int64)
        left_codes, right_codes = codes[: left.num_rows], codes[left.num_rows :]
        reads = (
            (left_codes, _np(left, "price"), _np(left, "avg_price")),
            (right_codes, _np(right, "price"), _np(right, "avg_price")),
        )
        payload = [(0, "symbol"), (0, "price"), (1, "symbol"), (1, "price")]
        names = ["l_symbol", "l_price", "r_symbol", "r_price"]
    left_ts, right_ts = _np(left, "ts"), _np(right, "ts")
    state = np.zeros(5, np.int64)
    hits = np.empty((GROUP, max(left.num_rows, right.num_rows) // BLOCK + 1), np.int64)
    out = np.empty((2, 1 << 16), np.int64)
    found = []
    while state[0] < left_ts.shape[0] or state[1] < right_ts.shape[0]:
        n_out = run(left_ts, reads[0], right_ts, reads[1], ws, state, hits, out)
        if n_out:
            found.append(out[:, :n_out].copy())
        else:  # the next tuple's window is larger than out
            out = np.empty((2, 2 * out.shape[1]), np.int64)
    rows = np.concatenate(found, axis=1) if found else np.empty((2, 0), np.int64)
    comparisons = int(state[4])
    ts = np.maximum(left_ts[rows[0]], right_ts[rows[1]])
    sides = (left, right)
    columns = {"ts": ts}
    for (side, column), name in zip(payload, names, strict=True):
        columns[name] = sides[side].column(column).take(pa.array(rows[side]))
    return pa.table(columns), comparisons


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
    table, comparisons = join(args.operator, left, right, args.ws)
    write_table(table, args.output)
    elapsed = time.perf_counter() - start
    print(
        f"{table.num_rows} rows, {comparisons:,} comparisons in {elapsed:.3f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
