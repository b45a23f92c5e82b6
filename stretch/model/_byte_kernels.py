"""Numba kernels of ``ByteTable``: numbering byte strings through an index over an arena.

A table of distinct byte strings: string t's bytes are ``arena[known[0, t]:known[1, t]]``
and its hash is ``known[2, t]``; ``slots`` (a power of two long) indexes them by hash with
linear probing, -1 for an empty slot; ``used`` holds the count of strings and of arena
bytes taken. Strings are compared byte for byte, so two different strings never share a
number. Hashes are 64-bit FNV-1a over the bytes.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["FNV_OFFSET", "FNV_PRIME", "FULL", "gather", "hash_spans", "number", "reindex"]

FULL = -1
"""``number``'s status when the arena or the index has no room: grow them, call again."""

FNV_OFFSET = -3750763034362895579  # 0xCBF29CE484222325 as an int64
FNV_PRIME = 1099511628211


@njit(nogil=True, cache=True)
def hash_spans(data: NDArray[np.uint8], offsets: NDArray[np.int64]) -> NDArray[np.int64]:
    """Spans ``data[offsets[r]:offsets[r + 1]]`` as ``number`` takes them: start, end, hash.

    O(bytes).
    """
    rows = offsets.shape[0] - 1
    found = np.empty((3, rows), dtype=np.int64)
    for r in range(rows):
        start, end = offsets[r], offsets[r + 1]
        h = np.int64(FNV_OFFSET)
        for i in range(start, end):
            h = (h ^ np.int64(data[i])) * FNV_PRIME
        found[0, r], found[1, r], found[2, r] = start, end, h
    return found


@njit(nogil=True, cache=True)
def number(
    data: NDArray[np.uint8],
    found: NDArray[np.int64],
    slots: NDArray[np.int64],
    known: NDArray[np.int64],
    arena: NDArray[np.uint8],
    used: NDArray[np.int64],
) -> NDArray[np.int64]:
    """The number of each span ``found`` gives (start, end, hash in ``data``).

    New strings are added in order of first appearance. Returns the numbers, or an array
    holding only ``FULL`` when a new string might not fit (the strings added before it
    stay: grow the table and call again). Expected O(bytes).
    """
    numbers = np.empty(found.shape[1], dtype=np.int64)
    mask = slots.shape[0] - 1
    n, taken = used[0], used[1]
    for k in range(found.shape[1]):
        start, end, h = found[0, k], found[1, k], found[2, k]
        s = (h ^ (h >> 29)) & mask
        while True:
            t = slots[s]
            if t < 0:
                break
            if known[2, t] == h and known[1, t] - known[0, t] == end - start:
                base = known[0, t] - start
                same = True
                for i in range(start, end):
                    if arena[base + i] != data[i]:
                        same = False
                        break
                if same:
                    break
            s = (s + 1) & mask
        if t < 0:  # new: copy its bytes to the arena
            if 2 * (n + 1) > slots.shape[0] or taken + end - start > arena.shape[0]:
                used[0], used[1] = n, taken
                return np.full(1, FULL, dtype=np.int64)
            if n == known.shape[1]:
                used[0], used[1] = n, taken
                return np.full(1, FULL, dtype=np.int64)
            arena[taken : taken + end - start] = data[start:end]
            known[0, n], known[1, n], known[2, n] = taken, taken + end - start, h
            taken += end - start
            slots[s] = n
            t = n
            n += 1
        numbers[k] = t
    used[0], used[1] = n, taken
    return numbers


@njit(nogil=True, cache=True)
def reindex(known: NDArray[np.int64], n: int, size: int) -> NDArray[np.int64]:
    """A new index of ``size`` slots (a power of two) over strings ``0..n``. O(size)."""
    slots = np.full(size, -1, dtype=np.int64)
    mask = size - 1
    for t in range(n):
        h = known[2, t]
        s = (h ^ (h >> 29)) & mask
        while slots[s] >= 0:
            s = (s + 1) & mask
        slots[s] = t
    return slots


@njit(nogil=True, cache=True)
def gather(
    arena: NDArray[np.uint8], known: NDArray[np.int64], numbers: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
    """The strings ``numbers`` as Arrow's layout: offsets (len + 1) and bytes. O(bytes)."""
    offsets = np.empty(numbers.shape[0] + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(numbers.shape[0]):
        t = numbers[i]
        offsets[i + 1] = offsets[i] + known[1, t] - known[0, t]
    data = np.empty(offsets[numbers.shape[0]], dtype=np.uint8)
    for i in range(numbers.shape[0]):
        t = numbers[i]
        data[offsets[i] : offsets[i + 1]] = arena[known[0, t] : known[1, t]]
    return offsets, data
