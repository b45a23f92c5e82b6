"""Give a deleted operator's memory back to the operating system.

A pipeline's objects refer to each other (threads, callbacks, its gates), so they are
freed by the cyclic garbage collector, whose full collections are rare: without help a
deleted operator stayed in memory until one ran, and repeated create-delete rounds grew
the process. ``release_memory`` collects them at once. The allocators then keep the freed
pages: Arrow's memory pool (mimalloc or jemalloc) is asked to release them, and glibc
malloc, which keeps them in its arenas (one per thread that allocated, at most 8 per
core), hands back the free ones on ``malloc_trim``. The gates' large arrays are separate mappings
(``scalegate._memory``), unmapped when collected.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable
from functools import cache

import pyarrow as pa

__all__ = ["release_memory"]

logger = logging.getLogger(__name__)


@cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (None on other C libraries)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_memory() -> None:
    """Collect unreachable objects now and return the allocator's free pages. O(heap)."""
    unreachable = gc.collect()
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
    logger.debug("released memory: %d unreachable objects collected", unreachable)
