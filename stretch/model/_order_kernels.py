"""Numba kernels over int64 sort keys (one column per row): ordering rows and checking order.

``order_ties`` is ``in_stream_order``'s: rows of equal ``ts`` put in order of their content;
``keys_in_order`` checks the output's ``(ts, cause)`` keys (``OutputBlock``).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["keys_in_order", "order_ties"]

_RUN = 16  # rows insertion-sorted before merging


@njit(nogil=True, cache=True, inline="always")
def _less(keys: NDArray[np.int64], a: int, b: int) -> bool:
    """Whether row ``a``'s keys come before row ``b``'s (column by column)."""
    for c in range(keys.shape[0]):
        x, y = keys[c, a], keys[c, b]
        if x != y:
            return bool(x < y)
    return False


@njit(nogil=True, cache=True)
def _sort(
    order: NDArray[np.int64], spare: NDArray[np.int64], a: int, b: int, keys: NDArray[np.int64]
) -> None:
    """Sort ``order[a:b]`` (row numbers) by their keys: insertion-sorted runs, then merges."""
    for s in range(a, b, _RUN):
        e = min(s + _RUN, b)
        for i in range(s + 1, e):
            row = order[i]
            j = i - 1
            while j >= s and _less(keys, row, order[j]):
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = row
    width = _RUN
    while width < b - a:
        for s in range(a, b, 2 * width):
            m, e = min(s + width, b), min(s + 2 * width, b)
            i, j, k = s, m, s
            while i < m and j < e:
                if _less(keys, order[j], order[i]):
                    spare[k] = order[j]
                    j += 1
                else:
                    spare[k] = order[i]
                    i += 1
                k += 1
            spare[k : k + m - i] = order[i:m]
            k += m - i
            spare[k : k + e - j] = order[j:e]
            order[s:e] = spare[s:e]
        width *= 2


@njit(nogil=True, cache=True)
def order_ties(ts: NDArray[np.int64], keys: NDArray[np.int64]) -> NDArray[np.int64]:
    """The order of the rows (``ts`` non-decreasing) with each run of equal ``ts`` by ``keys``.

    ``keys[c, r]`` is row r's key in column c. Returns an empty array when the rows are
    in that order already. O(n) then, O(n log g) for runs of at most g rows otherwise.
    """
    n = ts.shape[0]
    order = np.arange(n)
    spare = np.empty(0, dtype=np.int64)
    moved = False
    a = 0
    while a < n:
        b = a + 1
        while b < n and ts[b] == ts[a]:
            b += 1
        for i in range(a + 1, b):
            if _less(keys, i, i - 1):
                if not moved:
                    spare = np.empty(n, dtype=np.int64)
                    moved = True
                _sort(order, spare, a, b, keys)
                break
        a = b
    return order if moved else order[:0]


@njit(nogil=True, cache=True)
def keys_in_order(keys: NDArray[np.int64]) -> bool:
    """Whether the columns of ``keys`` are in lexicographic order (ties allowed). O(n)."""
    for i in range(keys.shape[1] - 1):  # noqa: SIM110 - Numba compiles no generator into all()
        if _less(keys, i + 1, i):
            return False
    return True
