"""A Numba kernel that splits UTF-8 texts into tokens as ``str.split()`` does.

``split`` finds the tokens of each text in the bytes of an Arrow string array: the runs
between whitespace, where whitespace is exactly what Python's ``str.isspace`` accepts
(ASCII 9-13 and 28-32, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F,
U+205F, U+3000, recognised by their UTF-8 bytes). Each token comes with its FNV-1a hash,
as ``stretch.model._byte_kernels.number`` takes it to number the tokens.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stretch.model._byte_kernels import FNV_OFFSET, FNV_PRIME

__all__ = ["split"]


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
        h = np.int64(FNV_OFFSET)
        start += 1
        for i in range(start, end):
            h = (h ^ np.int64(data[i])) * FNV_PRIME
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
        h = np.int64(FNV_OFFSET)
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
                h = np.int64(FNV_OFFSET)
            h = (h ^ np.int64(b)) * FNV_PRIME
            i += 1
        if start >= 0:
            n = _emit(data, start, end, h, hashtags, found, n)
        row_offsets[r + 1] = n
    return found[:, :n], row_offsets
