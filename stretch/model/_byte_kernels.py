"""Numba kernels of ``ByteTable``: numbering byte strings through an index over an arena.

A table of distinct byte strings: string t's bytes are ``arena[known[0, t]:known[1, t]]``
and its hash is ``known[2, t]``; ``slots`` (a power of two long) indexes them by hash with
linear probing, -1 for an empty slot; ``used`` holds the numbers handed out (``0..n``),
the arena bytes taken and how many numbers wait in ``free`` (a stack of the numbers of
dropped strings, ``DROPPED`` in ``known``, handed out again before new ones). Strings are
compared byte for byte, so two different strings never share a number. Hashes are 64-bit
FNV-1a over the bytes.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = [
    "DROPPED",
    "FNV_OFFSET",
    "FNV_PRIME",
    "FULL",
    "gather",
    "hash_spans",
    "number",
    "pack",
    "reindex",
]

FULL = -1
"""``number``'s status when the arena or the index has no room: grow them, call again."""

DROPPED = -1
"""``known[0, t]`` of a number whose string was dropped (its number is in ``free``)."""

_SHORT = 16
"""Strings of at most this many bytes ``gather`` copies byte by byte."""

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
    free: NDArray[np.int64],
) -> NDArray[np.int64]:
    """The number of each span ``found`` gives (start, end, hash in ``data``).

    New strings are added in order of first appearance, each taking the number on top of
    ``free`` if there is one, else the next number. Returns the numbers, or an array
    holding only ``FULL`` when a new string might not fit (the strings added before it
    stay: grow the table and call again). Expected O(bytes).
    """
    numbers = np.empty(found.shape[1], dtype=np.int64)
    mask = slots.shape[0] - 1
    n, taken, freed = used[0], used[1], used[2]
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
            fresh = freed == 0
            if (
                2 * (n + 1) > slots.shape[0]
                or taken + end - start > arena.shape[0]
                or (fresh and n == known.shape[1])
            ):
                used[0], used[1], used[2] = n, taken, freed
                return np.full(1, FULL, dtype=np.int64)
            if fresh:
                t = n
                n += 1
            else:
                freed -= 1
                t = free[freed]
            arena[taken : taken + end - start] = data[start:end]
            known[0, t], known[1, t], known[2, t] = taken, taken + end - start, h
            taken += end - start
            slots[s] = t
        numbers[k] = t
    used[0], used[1], used[2] = n, taken, freed
    return numbers


@njit(nogil=True, cache=True)
def reindex(known: NDArray[np.int64], n: int, size: int) -> NDArray[np.int64]:
    """A new index of ``size`` slots (a power of two) over strings ``0..n``. O(size)."""
    slots = np.full(size, -1, dtype=np.int64)
    mask = size - 1
    for t in range(n):
        if known[0, t] == DROPPED:
            continue
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
    """The strings ``numbers`` as Arrow's layout: offsets (len + 1) and bytes. O(bytes).

    A short string is copied byte by byte: a slice copy's own cost is more than its bytes'
    (3.2M strings of 5 bytes: 91 ms by slices, 45 ms so; 48 bytes and more: the same).
    """
    offsets = np.empty(numbers.shape[0] + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(numbers.shape[0]):
        t = numbers[i]
        offsets[i + 1] = offsets[i] + known[1, t] - known[0, t]
    data = np.empty(offsets[numbers.shape[0]], dtype=np.uint8)
    for i in range(numbers.shape[0]):
        t = numbers[i]
        start, end, at = known[0, t], known[1, t], offsets[i]
        if end - start <= _SHORT:
            for j in range(end - start):
                data[at + j] = arena[start + j]
        else:
            data[at : at + end - start] = arena[start:end]
    return offsets, data


@njit(nogil=True, cache=True)
def pack(
    arena: NDArray[np.uint8], known: NDArray[np.int64], keep: NDArray[np.bool_], room: int
) -> tuple[NDArray[np.uint8], int]:
    """A new arena of ``room`` bytes holding the kept strings' bytes, one after another.

    Strings ``0..len(keep)`` are kept where ``keep`` says (and were not dropped before);
    their spans in ``known`` move to the new arena and the others become ``DROPPED``.
    Returns the arena and the bytes taken. O(n + kept bytes).
    """
    packed = np.empty(room, dtype=np.uint8)
    taken = 0
    for t in range(keep.shape[0]):
        start, end = known[0, t], known[1, t]
        if start == DROPPED:
            continue
        if not keep[t]:
            known[0, t] = known[1, t] = DROPPED
            continue
        packed[taken : taken + end - start] = arena[start:end]
        known[0, t], known[1, t] = taken, taken + end - start
        taken += end - start
    return packed, taken
