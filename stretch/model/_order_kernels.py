"""Numba kernels over sort keys (one column per row): ordering rows and checking order.

``order_ties`` is ``in_stream_order``'s: rows of equal ``ts`` put in order of their content;
``keys_in_order`` checks the output's ``(ts, cause)`` keys (``OutputBlock``),
``merge_runs`` merges sorted runs of them (the instances' output blocks) and ``spans_of``
finds where the rows a drainer takes lie in those blocks.

A key column holds int64s that order like the column's values, or, for a text column, the
index of each row's string in a ``Texts`` (``kinds[c]``: the texts' row of offsets, -1 for
an int64 column), compared by their UTF-8 bytes without building Python strings.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["keys_in_order", "merge_runs", "order_ties", "order_ties_texts", "spans_of"]

_RUN = 16  # rows insertion-sorted before merging
_RANK_MAX = 256  # runs of equal ts up to this many rows are sorted by counting ranks
_NO_OFFSETS = np.zeros((0, 1), dtype=np.int64)
_NO_DATA = np.empty(0, dtype=np.uint8)


@njit(nogil=True, cache=True, inline="always")
def _text_less(offsets: NDArray[np.int64], data: NDArray[np.uint8], x: int, y: int) -> int:
    """-1, 0 or 1 as text x's bytes come before, equal or after text y's."""
    sx, ex, sy, ey = offsets[x], offsets[x + 1], offsets[y], offsets[y + 1]
    for i in range(min(ex - sx, ey - sy)):
        a, b = data[sx + i], data[sy + i]
        if a != b:
            return -1 if a < b else 1
    lx, ly = ex - sx, ey - sy
    return 0 if lx == ly else (-1 if lx < ly else 1)


@njit(nogil=True, cache=True, inline="always")
def _less(
    keys: NDArray[np.int64],
    kinds: NDArray[np.int64],
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
    a: int,
    b: int,
) -> bool:
    """Whether row ``a``'s keys come before row ``b``'s (column by column)."""
    for c in range(keys.shape[0]):
        x, y = keys[c, a], keys[c, b]
        if x != y:
            if kinds[c] < 0:
                return bool(x < y)
            order = _text_less(offsets[kinds[c]], data, x, y)
            if order != 0:
                return order < 0
    return False


@njit(nogil=True, cache=True)
def _merge(
    order: NDArray[np.int64],
    spare: NDArray[np.int64],
    bounds: NDArray[np.int64],
    k: int,
    keys: NDArray[np.int64],
    kinds: NDArray[np.int64],
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
) -> None:
    """Merge the sorted runs ``order[bounds[r]:bounds[r + 1]]``, r < k, into one (stable).

    Pairwise, so O(n log k); a pair whose first run ends before the second starts is left
    as it is without comparing. ``bounds`` is overwritten.
    """
    while k > 1:
        for r in range(0, k - 1, 2):
            s, m, e = bounds[r], bounds[r + 1], bounds[r + 2]
            empty = min(m - s, e - m) == 0
            if empty or not _less(keys, kinds, offsets, data, order[m], order[m - 1]):
                continue  # already in order
            i, j, o = s, m, s
            while i < m and j < e:
                if _less(keys, kinds, offsets, data, order[j], order[i]):
                    spare[o] = order[j]
                    j += 1
                else:
                    spare[o] = order[i]
                    i += 1
                o += 1
            spare[o : o + m - i] = order[i:m]
            o += m - i
            spare[o : o + e - j] = order[j:e]
            order[s:e] = spare[s:e]
        half = (k + 1) // 2
        for r in range(half):
            bounds[r] = bounds[2 * r]
        bounds[half] = bounds[k]
        k = half


@njit(nogil=True, cache=True)
def _sort(
    order: NDArray[np.int64],
    spare: NDArray[np.int64],
    bounds: NDArray[np.int64],
    a: int,
    b: int,
    keys: NDArray[np.int64],
    kinds: NDArray[np.int64],
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
) -> None:
    """Sort ``order[a:b]`` (row numbers) by their keys (stable).

    The rows' ascending runs, each extended to at least ``_RUN`` rows by insertion, are
    merged pairwise: O(n log r) for r runs, so rows that interleave a few sorted sequences
    (several instances' output at one ``ts``) cost little more than a pass.
    """
    k = 0
    s = a
    while s < b:
        e = s + 1
        while e < b and not _less(keys, kinds, offsets, data, order[e], order[e - 1]):
            e += 1
        if e - s < _RUN:
            e = min(s + _RUN, b)
            for i in range(s + 1, e):
                row = order[i]
                j = i - 1
                while j >= s and _less(keys, kinds, offsets, data, row, order[j]):
                    order[j + 1] = order[j]
                    j -= 1
                order[j + 1] = row
        bounds[k] = s
        k += 1
        s = e
    bounds[k] = b
    _merge(order, spare, bounds, k, keys, kinds, offsets, data)


@njit(nogil=True, cache=True)
def _rank_sort(
    order: NDArray[np.int64],
    spare: NDArray[np.int64],
    bounds: NDArray[np.int64],
    a: int,
    b: int,
    c: int,
    keys: NDArray[np.int64],
    kinds: NDArray[np.int64],
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
) -> None:
    """Sort ``order[a:b]``, which holds ``a .. b - 1``, by the rows' keys (stable).

    For a short run whose keys before column ``c`` are equal and whose column ``c`` is an
    int64: a row's place is the number of rows before it whose key ``c`` is at most its
    own plus the rows after it whose key ``c`` is smaller, counted by loops that the
    compiler vectorizes and that have no branch to mispredict. That is O(g^2) for g rows,
    yet cheaper than a comparison sort on shuffled rows while g is small (``_RANK_MAX``).
    Rows with equal key ``c`` then go in the order of the other keys (by insertion, or
    ``_sort`` when many are equal). The loops run over slices from 0: indexing from ``a``
    keeps Numba's negative-index check in the loop, which stops it from vectorizing.
    """
    run = keys[c, a:b]
    for i in range(b - a):
        value = run[i]
        rank = 0
        head = run[:i]
        for j in range(head.shape[0]):
            rank += head[j] <= value
        tail = run[i:]
        for j in range(tail.shape[0]):
            rank += tail[j] < value
        order[a + rank] = a + i
    if c == keys.shape[0] - 1:
        return
    column = keys[c]
    s = a
    while s < b:
        e = s + 1
        while e < b and column[order[e]] == column[order[s]]:
            e += 1
        if e - s > _RUN:
            _sort(order, spare, bounds, s, e, keys, kinds, offsets, data)
            s = e
            continue
        # Written out, like _sort's: one insertion helper for both, inlined or not, made
        # this kernel 2.4x slower on ties (17 to 41 ns a row), measured.
        for i in range(s + 1, e):
            row = order[i]
            j = i - 1
            while j >= s and _less(keys, kinds, offsets, data, row, order[j]):
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = row
        s = e


@njit(nogil=True, cache=True)
def _ranking_column(
    keys: NDArray[np.int64], kinds: NDArray[np.int64], a: int, b: int, descents: int
) -> int:
    """The column by which ``_rank_sort`` sorts rows ``a .. b - 1``, or -1 to merge them.

    The first column whose keys differ in the run, if it is an int64 column; -1 for a
    long run, a text column, or rows that are already a few ascending runs (``descents``
    places where a row is below the one before: merging them costs about one pass).
    """
    if b - a > _RANK_MAX or (descents + 1) * _RUN <= b - a:
        return -1
    for c in range(keys.shape[0]):
        for i in range(a + 1, b):
            if keys[c, i] != keys[c, a]:
                return c if kinds[c] < 0 else -1
    return -1


@njit(nogil=True, cache=True)
def order_ties_texts(
    ts: NDArray[np.int64],
    keys: NDArray[np.int64],
    kinds: NDArray[np.int64],
    offsets: NDArray[np.int64],
    data: NDArray[np.uint8],
) -> NDArray[np.int64]:
    """The order of the rows (``ts`` non-decreasing) with each run of equal ``ts`` by ``keys``.

    ``keys[c, r]`` is row r's key in column c: an int64 that orders like its value where
    ``kinds[c]`` is -1, else the index of its text, whose bytes are
    ``data[offsets[kinds[c], i]:offsets[kinds[c], i + 1]]``. Returns an empty array when
    the rows are in that order already. O(n) then, else O(n log g) for runs of at most g
    rows, or O(n g) in vectorized loops for shuffled runs of at most ``_RANK_MAX``.
    """
    n = ts.shape[0]
    order = np.arange(n)
    spare = np.empty(0, dtype=np.int64)
    bounds = np.empty(0, dtype=np.int64)
    moved = False
    a = 0
    while a < n:
        b = a + 1
        while b < n and ts[b] == ts[a]:
            b += 1
        descents = 0
        for i in range(a + 1, b):
            descents += _less(keys, kinds, offsets, data, i, i - 1)
        if descents > 0:
            if not moved:
                spare = np.empty(n, dtype=np.int64)
                bounds = np.empty(n // _RUN + 2, dtype=np.int64)
                moved = True
            c = _ranking_column(keys, kinds, a, b, descents)
            if c < 0:
                _sort(order, spare, bounds, a, b, keys, kinds, offsets, data)
            else:
                _rank_sort(order, spare, bounds, a, b, c, keys, kinds, offsets, data)
        a = b
    return order if moved else order[:0]


@njit(nogil=True, cache=True)
def order_ties(ts: NDArray[np.int64], keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """``order_ties_texts`` with int64 keys only."""
    kinds = np.full(keys.shape[0], -1, dtype=np.int64)
    return order_ties_texts(ts, keys, kinds, _NO_OFFSETS, _NO_DATA)


@njit(nogil=True, cache=True)
def keys_in_order(keys: NDArray[np.int64]) -> bool:
    """Whether the columns of ``keys`` are in lexicographic order (ties allowed). O(n)."""
    kinds = np.full(keys.shape[0], -1, dtype=np.int64)
    for i in range(keys.shape[1] - 1):  # noqa: SIM110 - Numba compiles no generator into all()
        if _less(keys, kinds, _NO_OFFSETS, _NO_DATA, i + 1, i):
            return False
    return True


@njit(nogil=True, cache=True)
def merge_runs(keys: NDArray[np.int64], starts: NDArray[np.int64]) -> NDArray[np.int64]:
    """The order of the columns of ``keys``, given as sorted runs, merged (stable).

    Run i is ``keys[:, starts[i]:starts[i + 1]]``, each in lexicographic order;
    ``starts`` begins at 0 and ends at ``keys.shape[1]``. Equal keys keep their runs'
    order. Returns an empty array when the runs are in order one after the other (O(r)
    for r runs), else O(n log r).
    """
    n = keys.shape[1]
    kinds = np.full(keys.shape[0], -1, dtype=np.int64)
    k = starts.shape[0] - 1
    for i in range(1, k):  # inside a run the order holds: only its first row can break it
        b = starts[i]
        if 0 < b < n and _less(keys, kinds, _NO_OFFSETS, _NO_DATA, b, b - 1):
            order = np.arange(n)
            spare = np.empty(n, dtype=np.int64)
            _merge(order, spare, starts.copy(), k, keys, kinds, _NO_OFFSETS, _NO_DATA)
            return order
    return np.empty(0, dtype=np.int64)


@njit(nogil=True, cache=True)
def spans_of(
    block_of: NDArray[np.int64], at: NDArray[np.int64], blocks: int
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """Rows ``at[i]`` of blocks ``block_of[i]``: each block's span, and the rows in the spans.

    Returns each block's first and end row taken (``low``, ``high``: its span) and each
    row's index in the spans laid end to end, block after block. O(rows + blocks).
    """
    low = np.full(blocks, np.iinfo(np.int64).max, dtype=np.int64)
    high = np.zeros(blocks, dtype=np.int64)
    for i in range(at.shape[0]):
        b = block_of[i]
        low[b] = min(low[b], at[i])
        high[b] = max(high[b], at[i] + 1)
    start = np.empty(blocks, dtype=np.int64)
    s = 0
    for b in range(blocks):
        start[b] = s
        s += max(high[b] - low[b], 0)
    indices = np.empty(at.shape[0], dtype=np.int64)
    for i in range(at.shape[0]):
        b = block_of[i]
        indices[i] = start[b] + at[i] - low[b]
    return low, high, indices
