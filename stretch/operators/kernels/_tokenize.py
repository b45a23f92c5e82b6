"""Numba kernels that split UTF-8 texts into tokens as ``str.split()`` does, and number them.

``split`` finds the tokens of each text in the bytes of an Arrow string array: the runs
between whitespace, where whitespace is exactly what Python's ``str.isspace`` accepts
(ASCII 9-13 and 28-32, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
U+205F, U+3000, recognised by their UTF-8 bytes). ``number`` gives each token the number
of its bytes in a table of the tokens seen so far (an open-addressing index over an arena
of their bytes, compared byte for byte, so two tokens never share a number), adding new
ones in order of first appearance.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["FULL", "number", "split"]

FULL = -1
"""``number``'s status when the arena or the index has no room: grow them, call again."""

_FNV_OFFSET = -3750763034362895579  # 0xCBF29CE484222325 as an int64
_FNV_PRIME = 1099511628211


@njit(nogil=True, cache=True, inline="always")
def _space(data: NDArray[np.uint8], i: int, end: int) -> int:
    """The byte length of the whitespace character at ``data[i]``, or 0 if it is none."""
    b = data[i]
    if b < 0x80:
        return 1 if (9 <= b <= 13) or (28 <= b <= 32) else 0
    if b == 0xC2 and i + 1 < end:
        return 2 if data[i + 1] == 0x85 or data[i + 1] == 0xA0 else 0
    if i + 2 >= end:
        return 0
    b1, b2 = data[i + 1], data[i + 2]
    if b == 0xE1:
        return 3 if b1 == 0x9A and b2 == 0x80 else 0
    if b == 0xE2:
        if b1 == 0x80 and (b2 <= 0x8A or 0xA8 <= b2 <= 0xA9 or b2 == 0xAF):
            return 3  # U+2000-U+200A (b2 >= 0x80 in valid UTF-8), U+2028, U+2029, U+202F
        return 3 if b1 == 0x81 and b2 == 0x9F else 0
    if b == 0xE3:
        return 3 if b1 == 0x80 and b2 == 0x80 else 0
    return 0


@njit(nogil=True, cache=True, inline="always")
def _emit(
    data: NDArray[np.uint8],
    start: int,
    end: int,
    h: np.int64,
    hashtags: bool,
    found: NDArray[np.int64],
    n: int,
) -> int:
    """Record token ``data[start:end]`` with hash ``h`` as token n, if kept; return n after."""
    if hashtags:
        if data[start] != 0x23 or end - start < 2:  # '#', and something after it
            return n
        h = np.int64(_FNV_OFFSET)
        start += 1
        for i in range(start, end):
            h = (h ^ np.int64(data[i])) * _FNV_PRIME
    found[0, n], found[1, n], found[2, n] = start, end, h
    return n + 1


@njit(nogil=True, cache=True)
def split(
    data: NDArray[np.uint8], offsets: NDArray[np.int64], hashtags: bool
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The tokens of each text, and row offsets: text r's are ``offsets[r]..offsets[r+1]``.

    Text r is ``data[offsets[r]:offsets[r + 1]]``. A token is given by its byte start,
    end and hash (rows of the first result). With ``hashtags``, only tokens ``#x`` with
    ``x`` not empty are kept, as ``x`` (``catalog.hashtag_keys``). One pass over the bytes.
    """
    rows = offsets.shape[0] - 1
    found = np.empty((3, (offsets[rows] - offsets[0]) // 2 + rows), dtype=np.int64)
    row_offsets = np.empty(rows + 1, dtype=np.int64)
    row_offsets[0] = 0
    n = 0
    for r in range(rows):
        i, end = offsets[r], offsets[r + 1]
        start = -1
        h = np.int64(_FNV_OFFSET)
        while i < end:
            b = data[i]
            if b < 0x80:  # ASCII: whitespace is 9-13 and 28-32
                width = 1 if b == 32 or (9 <= b <= 13) or (28 <= b <= 31) else 0
            else:
                width = _space(data, i, end)
            if width:
                if start >= 0:
                    n = _emit(data, start, i, h, hashtags, found, n)
                    start = -1
                i += width
                continue
            if start < 0:
                start = i
                h = np.int64(_FNV_OFFSET)
            h = (h ^ np.int64(b)) * _FNV_PRIME
            i += 1
        if start >= 0:
            n = _emit(data, start, end, h, hashtags, found, n)
        row_offsets[r + 1] = n
    return found[:, :n], row_offsets


@njit(nogil=True, cache=True)
def number(
    data: NDArray[np.uint8],
    found: NDArray[np.int64],
    slots: NDArray[np.int64],
    known: NDArray[np.int64],
    arena: NDArray[np.uint8],
    used: NDArray[np.int64],
) -> NDArray[np.int64]:
    """The number of each token ``found`` gives (``split``); new ones are added in order.

    The table: ``used[0]`` tokens, token t's bytes ``arena[known[0, t]:known[1, t]]`` and
    its hash ``known[2, t]``; ``slots`` (a power of two long) indexes them by hash, -1 for
    an empty slot; ``used[1]`` bytes of the arena are taken. Returns the numbers, or an
    array holding only ``FULL`` when a new token might not fit (the tokens added before
    it stay: grow the table and call again).
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
    """A new index of ``size`` slots (a power of two) over tokens ``0..n``."""
    slots = np.full(size, -1, dtype=np.int64)
    mask = size - 1
    for t in range(n):
        h = known[2, t]
        s = (h ^ (h >> 29)) & mask
        while slots[s] >= 0:
            s = (s + 1) & mask
        slots[s] = t
    return slots
