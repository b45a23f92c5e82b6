"""Arrays whose memory follows what is written to them, not their size.

A gate's node array is sized for its capacity (up to 2**20 nodes, about 150 MB) but
usually holds a few thousand nodes. ``lazy_zeros`` maps it as anonymous private memory:
the kernel hands out zero pages as they are first written, so a gate costs the pages its
nodes have used (its high-water mark, since freed nodes are reused first), and unmapping
on release gives them back to the operating system at once, whatever the allocator keeps.
Capacity stays the bound that turns into backpressure; only the commitment is lazy.
"""

from __future__ import annotations

import math
import mmap

import numpy as np
from numpy.typing import NDArray

__all__ = ["lazy_zeros"]

_LAZY_MIN_BYTES = 1 << 16
"""Smaller arrays come from the allocator (a mapping costs a system call and a page)."""


def lazy_zeros(shape: tuple[int, ...]) -> NDArray[np.int64]:
    """An int64 array of zeros whose pages are committed on first write. O(1).

    Falls back to ``np.zeros`` for small arrays and where anonymous mappings are not
    available.
    """
    size = math.prod(shape) * np.dtype(np.int64).itemsize
    private = getattr(mmap, "MAP_PRIVATE", None)
    anonymous = getattr(mmap, "MAP_ANONYMOUS", None)
    if size < _LAZY_MIN_BYTES or private is None or anonymous is None:
        return np.zeros(shape, dtype=np.int64)
    pages = mmap.mmap(-1, size, flags=private | anonymous)
    array: NDArray[np.int64] = np.frombuffer(pages, dtype=np.int64).reshape(shape)
    return array
