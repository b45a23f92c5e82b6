"""1T of section 8.3: the best simple single-thread program for ScaleJoin (or hedge).

No runtime: read the two input files, merge the two ``ts``-sorted streams in the total
order (ts, then L before R), and for each tuple compare it with the opposite side's
window, which is a contiguous slice of that side's own columns (``[head, i)``: the
tuples already arrived, less those more than WS older, dropped by moving ``head``). The
predicate is written into the loop. Matches are written to an output file with the
columns ``stretch replay`` writes (``ts`` = the later tuple's). Both ScaleJoin's and
hedge's predicates are here; hedge feeds one trade file as both L and R.

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


@njit(inline="always")
def _scalejoin_match(left: Columns, l: int, right: Columns, r: int) -> bool:
    return bool(abs(left[0][l] - right[0][r]) <= 10 and abs(left[1][l] - right[1][r]) <= 10)


@njit(inline="always")
def _hedge_match(left: Columns, l: int, right: Columns, r: int) -> bool:
    if left[0][l] == right[0][r]:
        return False
    nd_left = (left[1][l] - left[2][l]) / left[2][l]
    if nd_left == 0:
        return False
    nd_right = (right[1][r] - right[2][r]) / right[2][r]
    return bool(-1.05 <= nd_right / nd_left <= -0.95)


@njit(inline="always")
def _merge_join(
    match: Callable[[Columns, int, Columns, int], bool],
    left_ts: NDArray[np.int64],
    left: Columns,
    right_ts: NDArray[np.int64],
    right: Columns,
    ws: int,
    out: NDArray[np.int64],
) -> tuple[int, int]:
    """Matches as (L row, R row) in ``out``; returns (matches, comparisons).

    Stops early (matches == out.shape[1] + 1) when ``out`` is too small.
    """
    n_left, n_right = left_ts.shape[0], right_ts.shape[0]
    i = k = 0
    head_left = head_right = 0
    n_out = 0
    comparisons = 0
    cap = out.shape[1]
    while i < n_left or k < n_right:
        if k == n_right or (i < n_left and left_ts[i] <= right_ts[k]):
            ts = left_ts[i]
            while head_right < k and right_ts[head_right] + ws < ts:
                head_right += 1
            comparisons += k - head_right
            for r in range(head_right, k):
                if match(left, i, right, r):
                    if n_out == cap:
                        return cap + 1, comparisons
                    out[0, n_out] = i
                    out[1, n_out] = r
                    n_out += 1
            i += 1
        else:
            ts = right_ts[k]
            while head_left < i and left_ts[head_left] + ws < ts:
                head_left += 1
            comparisons += i - head_left
            for l in range(head_left, i):
                if match(left, l, right, k):
                    if n_out == cap:
                        return cap + 1, comparisons
                    out[0, n_out] = l
                    out[1, n_out] = k
                    n_out += 1
            k += 1
    return n_out, comparisons


@njit(nogil=True, cache=True)
def _scalejoin_1t(
    left_ts: NDArray[np.int64],
    left: Columns,
    right_ts: NDArray[np.int64],
    right: Columns,
    ws: int,
    out: NDArray[np.int64],
) -> tuple[int, int]:
    return _merge_join(_scalejoin_match, left_ts, left, right_ts, right, ws, out)


@njit(nogil=True, cache=True)
def _hedge_1t(
    left_ts: NDArray[np.int64],
    left: Columns,
    right_ts: NDArray[np.int64],
    right: Columns,
    ws: int,
    out: NDArray[np.int64],
) -> tuple[int, int]:
    return _merge_join(_hedge_match, left_ts, left, right_ts, right, ws, out)


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
    out = np.empty((2, 1 << 16), np.int64)
    while True:
        n_out, comparisons = run(left_ts, reads[0], right_ts, reads[1], ws, out)
        if n_out <= out.shape[1]:
            break
        out = np.empty((2, 4 * out.shape[1]), np.int64)
    rows = out[:, :n_out]
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
