"""An open-addressing hash index over an array of int64 keys, in NumPy arrays.

``slots`` (a power of two long, at most half full) holds entry numbers or ``EMPTY``;
entry e's key is ``keys[e]``. Being plain arrays, the index is shared with Numba kernels
at no cost and its memory is visible to ``tracemalloc`` like the rest of the state.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["EMPTY", "build_index", "find", "index_size", "insert"]

EMPTY = -1
_MIX = -7046029254386353131  # 0x9E3779B97F4A7C15 (Fibonacci hashing) as an int64


@njit(nogil=True, cache=True)
def find(slots: NDArray[np.int64], keys: NDArray[np.int64], key: int) -> int:
    """The entry holding ``key``, or ``-1 - s`` where s is the empty slot it would take."""
    mask = slots.shape[0] - 1
    h = key * _MIX
    s = (h ^ (h >> 29)) & mask
    while True:
        e = int(slots[s])
        if e == EMPTY:
            return -1 - int(s)
        if keys[e] == key:
            return e
        s = (s + 1) & mask


@njit(nogil=True, cache=True)
def insert(slots: NDArray[np.int64], keys: NDArray[np.int64], start: int, stop: int) -> None:
    """Index entries ``start..stop`` (keys not indexed yet; the slots must have room)."""
    for e in range(start, stop):
        slots[-1 - find(slots, keys, keys[e])] = e


def build_index(keys: NDArray[np.int64], n: int, size: int) -> NDArray[np.int64]:
    """Slots (``size`` of them, a power of two >= 2n) indexing ``keys[:n]`` (distinct)."""
    slots = np.full(size, EMPTY, dtype=np.int64)
    insert(slots, keys, 0, n)
    return slots


def index_size(n: int) -> int:
    """The slot count for up to ``n`` entries: a power of two at least 2n (and 64)."""
    return max(64, 1 << (2 * max(n, 1) - 1).bit_length())
