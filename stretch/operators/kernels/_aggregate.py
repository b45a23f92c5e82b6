"""Numba kernels of the per-window aggregates (Operators 9 and 14): counts and maxima.

The tweets' keys (words, word pairs or hashtags) are numbered once, when their rows are
first read (``stretch.vsn._compiled.aggregates.KeyTable``); a row's keys are then a slice of a
flat array of key numbers, in f_MK's order. ``update_window`` applies the rows of a run
that fall in one window ``[l, l + WS)`` to an instance's table of that window, and
``pair_codes`` builds paircount's keys from a row's tokens. With panes (Enorm), the same
``update_window`` fills one table per pane, and ``combine_panes`` folds a window's panes
into its table when the window closes.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stretch.operators.kernels._hashing import find

__all__ = ["combine_panes", "distinct_in_rows", "lookup_codes", "pair_codes", "update_window"]

CREATED = 4
"""Rows of ``created``: the creator's ts, source, seq and key index (the cause of f_O)."""

_TOKEN_BITS = 31
"""A pair's code is ``first << 31 | second`` for token numbers below 2**31."""


@njit(nogil=True, cache=True)
def pair_codes(
    tokens: NDArray[np.int64], offsets: NDArray[np.int64], b: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Paircount's f_MK for every row: codes of pairs ``(W[i], W[j])``, ``0 < j - i <= b``.

    Row r's tokens are ``tokens[offsets[r]:offsets[r + 1]]``. Its pairs come in the
    order i, then j, with repeats dropped (first occurrence kept), as ``catalog.pairs``
    lists them. Returns the flat codes and their row offsets.
    """
    rows = offsets.shape[0] - 1
    total = 0
    for r in range(rows):
        n = offsets[r + 1] - offsets[r]
        for i in range(n):
            total += min(n - 1 - i, b)
    codes = np.empty(total, dtype=np.int64)
    out_offsets = np.empty(rows + 1, dtype=np.int64)
    out_offsets[0] = 0
    n_out = 0
    for r in range(rows):
        start, stop = offsets[r], offsets[r + 1]
        first = n_out
        for i in range(start, stop):
            for j in range(i + 1, min(stop, i + 1 + b)):
                codes[n_out] = tokens[i] << _TOKEN_BITS | tokens[j]
                n_out += 1
        n_out = first + _drop_repeats(codes[first:n_out])
        out_offsets[r + 1] = n_out
    return codes[:n_out], out_offsets


@njit(nogil=True, cache=True)
def _drop_repeats(codes: NDArray[np.int64]) -> int:
    """Keep the first occurrence of each code, in order, at the front; return the count."""
    order = np.argsort(codes, kind="mergesort")
    keep = np.ones(codes.shape[0], dtype=np.bool_)
    for k in range(1, order.shape[0]):
        if codes[order[k]] == codes[order[k - 1]]:
            keep[order[k]] = False
    n = 0
    for k in range(codes.shape[0]):
        if keep[k]:
            codes[n] = codes[k]
            n += 1
    return n


@njit(nogil=True, cache=True)
def lookup_codes(
    codes: NDArray[np.int64], slots: NDArray[np.int64], known: NDArray[np.int64]
) -> NDArray[np.int64]:
    """The key number of each code (``known[number]`` is its code), or -1 if unknown."""
    out = np.empty(codes.shape[0], dtype=np.int64)
    for k in range(codes.shape[0]):
        out[k] = max(find(slots, known, codes[k]), -1)
    return out


@njit(nogil=True, cache=True)
def update_window(
    lo: int,
    hi: int,
    run_ts: NDArray[np.int64],
    run_source: NDArray[np.int64],
    run_seq: NDArray[np.int64],
    run_rows: NDArray[np.int64],
    key_offsets: NDArray[np.int64],
    key_numbers: NDArray[np.int64],
    key_groups: NDArray[np.int64],
    owned: NDArray[np.bool_],
    lengths: NDArray[np.int64],
    take_max: bool,
    slots: NDArray[np.int64],
    keys: NDArray[np.int64],
    values: NDArray[np.int64],
    created: NDArray[np.int64],
    count: NDArray[np.int64],
) -> int:
    """Apply run tuples ``lo..hi`` (all in this window) to the window's owned keys.

    Tuple i's keys and length are at ``run_rows[i]`` in ``key_offsets`` and ``lengths``.

    The window's table holds ``count[0]`` entries: ``keys``, ``values`` and ``created``
    (``CREATED`` rows), found by key number through the hash index ``slots``. A new
    entry starts at 0 (the catalog's new_state) and records the tuple that created it;
    then the value becomes ``value + 1`` (count) or ``max(value, length)`` (longest tweet).
    Returns the tuple it stopped before: ``hi`` when done, earlier when the next tuple's
    keys might not fit (the caller grows the arrays and calls again from there).
    """
    n = count[0]
    capacity = min(keys.shape[0], slots.shape[0] // 2)
    for i in range(lo, hi):
        seq, row = run_seq[i], run_rows[i]
        first, last = key_offsets[row], key_offsets[row + 1]
        if n + (last - first) > capacity:
            count[0] = n
            return i
        for p in range(first, last):
            key = key_numbers[p]
            if not owned[key_groups[key]]:
                continue
            e = find(slots, keys, key)
            if e < 0:
                slots[-1 - e] = n
                e = n
                n += 1
                keys[e] = key
                values[e] = 0
                created[0, e] = run_ts[i]
                created[1, e] = run_source[i]
                created[2, e] = seq
                created[3, e] = p - first
            if take_max:
                values[e] = max(values[e], lengths[row])
            else:
                values[e] += 1
    count[0] = n
    return hi


@njit(nogil=True, cache=True)
def combine_panes(
    keys: NDArray[np.int64],
    values: NDArray[np.int64],
    created: NDArray[np.int64],
    first: int,
    take_max: bool,
    position: NDArray[np.int64],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """A window's table from its panes' entries, given pane after pane, earliest first.

    Entry i's creator is ``created[:, first + i]``: the caller passes its whole array, not
    a slice, whose layout (contiguous or not) would make Numba compile the kernel twice.

    Each key's value is the sum (counts) or the maximum (``take_max``) of its panes'
    values: both are associative, so this equals folding the window's tuples one by one.
    Its creator is the one of its earliest pane, which is the earliest tuple of the window
    with that key (a pane's entry records its own earliest tuple). Returns the distinct
    keys with their values and creators, in order of first appearance.

    ``position`` is scratch indexed by key number (longer than the largest), every entry
    -1; it is left so. O(entries), no hashing: key numbers are dense.
    """
    n_in = keys.shape[0]
    out_keys = np.empty(n_in, dtype=np.int64)
    out_values = np.empty(n_in, dtype=np.int64)
    out_created = np.empty((CREATED, n_in), dtype=np.int64)
    n = 0
    for i in range(n_in):
        key = keys[i]
        e = position[key]
        if e < 0:
            position[key] = n
            out_keys[n] = key
            out_values[n] = values[i]
            for c in range(CREATED):
                out_created[c, n] = created[c, first + i]
            n += 1
        elif take_max:
            out_values[e] = max(out_values[e], values[i])
        else:
            out_values[e] += values[i]
    for e in range(n):
        position[out_keys[e]] = -1
    return out_keys[:n], out_values[:n], out_created[:, :n]


@njit(nogil=True, cache=True)
def distinct_in_rows(
    numbers: NDArray[np.int64], offsets: NDArray[np.int64], seen: NDArray[np.int64], first_row: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Each row's numbers with repeats dropped (first occurrence kept, in order).

    Row r's numbers are ``numbers[offsets[r]:offsets[r + 1]]``. ``seen[k]`` is the id of
    the last row that kept number k, rows being numbered ``first_row + r``: ids must grow
    from call to call (then ``seen`` needs no reset), and ``seen`` must be longer than the
    largest number. Returns the kept numbers and each row's count of them. O(n).
    """
    rows = offsets.shape[0] - 1
    out = np.empty_like(numbers)
    counts = np.empty(rows, dtype=np.int64)
    n_out = 0
    for r in range(rows):
        first = n_out
        row = first_row + r
        for i in range(offsets[r], offsets[r + 1]):
            k = numbers[i]
            if seen[k] != row:
                seen[k] = row
                out[n_out] = k
                n_out += 1
        counts[r] = n_out - first
    return out[:n_out], counts
