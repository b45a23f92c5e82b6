"""A table of distinct byte strings, numbered in order of first appearance.

The strings live in one arena of bytes, indexed by an open-addressing hash table
(``stretch.model._byte_kernels``), so numbering a column of strings runs in a compiled
loop over its Arrow buffers, with no Python string made, and a column of numbers turns
back into an Arrow string array by one copy of its bytes. It costs each distinct string
its bytes plus about 40 bytes (its span and hash, and two index slots at most).

``retain`` drops the strings its owner no longer uses: the arena is packed, the index
rebuilt, and their numbers are handed out again to later new strings.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.model._byte_kernels import DROPPED, FULL, gather, hash_spans, number, pack, reindex

__all__ = ["ByteTable", "utf8_buffers"]


def utf8_buffers(texts: pa.Array) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """The bytes of ``texts`` (strings, no nulls) and offsets: text r is ``[o[r]:o[r + 1]]``."""
    texts = texts.cast(pa.string())
    _, offsets_buffer, data_buffer = texts.buffers()
    if offsets_buffer is None:  # an empty array may have no buffers
        return np.empty(0, dtype=np.uint8), np.zeros(1, dtype=np.int64)
    offsets = np.frombuffer(offsets_buffer, dtype=np.int32)[
        texts.offset : texts.offset + len(texts) + 1
    ].astype(np.int64)
    data = (
        np.frombuffer(data_buffer, dtype=np.uint8)
        if data_buffer is not None
        else np.empty(0, dtype=np.uint8)
    )
    return data, offsets


MIN_ARENA = 1 << 16
"""The smallest arena, in bytes."""
MIN_SPANS = 512
"""The fewest strings ``known`` has room for."""
MIN_SLOTS = 1024
"""The smallest index."""
STRING_COST = 40
"""Bytes a string costs beyond its own: its span and hash (24) and index slots (about 16)."""


class ByteTable:
    """Distinct byte strings and their numbers (0, 1, ... in order of first appearance).

    Not thread-safe for writers: its owner serialises ``number`` calls. ``strings`` may
    run beside a ``number`` call for numbers handed out before it (the arrays only grow
    into copies; a string's bytes never move within one), but not beside ``retain``.
    Once ``retain`` dropped strings, their numbers go to the next new strings (the lowest
    first), so numbers then no longer follow first appearance.
    """

    def __init__(self) -> None:
        self._slots = np.full(MIN_SLOTS, -1, dtype=np.int64)
        self._known = np.empty((3, MIN_SPANS), dtype=np.int64)
        self._arena = np.empty(MIN_ARENA, dtype=np.uint8)
        self._used = np.zeros(3, dtype=np.int64)  # numbers handed out, bytes, free numbers
        self._free = np.empty(0, dtype=np.int64)

    def __len__(self) -> int:
        """The strings held."""
        return int(self._used[0] - self._used[2])

    @property
    def numbers(self) -> int:
        """Numbers handed out: every number in use is below it."""
        return int(self._used[0])

    @property
    def nbytes(self) -> int:
        """Bytes held: the arena, the spans, the index and the free numbers."""
        arrays = (self._arena, self._known, self._slots, self._free)
        return int(sum(a.nbytes for a in arrays))

    @property
    def held_bytes(self) -> int:
        """What the strings held cost: their bytes plus ``STRING_COST`` each.

        Unlike ``nbytes`` it does not count room the arrays keep for later strings.
        """
        return int(self._used[1]) + STRING_COST * len(self)

    def number(self, data: NDArray[np.uint8], found: NDArray[np.int64]) -> NDArray[np.int64]:
        """The numbers of spans ``found`` of ``data`` (start, end, hash), adding new ones.

        Expected O(bytes), amortised over the table's growth.
        """
        while True:
            numbers = number(
                data, found, self._slots, self._known, self._arena, self._used, self._free
            )
            if not (numbers.shape[0] == 1 and numbers[0] == FULL):
                return numbers
            self._grow(int((found[1] - found[0]).sum()))

    def number_texts(self, texts: pa.Array) -> NDArray[np.int64]:
        """The numbers of the strings of ``texts`` (no nulls), adding new ones. O(bytes)."""
        data, offsets = utf8_buffers(texts)
        return self.number(data, hash_spans(data, offsets))

    def strings(self, numbers: NDArray[np.int64]) -> pa.Array:
        """The strings of ``numbers`` as an Arrow string array. O(their bytes)."""
        offsets, data = gather(self._arena, self._known, numbers)
        if offsets[-1] < 2**31:
            return pa.Array.from_buffers(
                pa.string(),
                len(numbers),
                [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)],
            )
        large = pa.Array.from_buffers(
            pa.large_string(), len(numbers), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )
        return large.cast(pa.string())

    def retain(self, keep: NDArray[np.bool_]) -> int:
        """Keep only the strings whose number ``t`` has ``keep[t]``; return how many went.

        ``keep`` covers ``0..numbers``. The kept strings keep their numbers; the arena is
        packed into one of twice their bytes (at least ``MIN_ARENA``), the index is rebuilt,
        and the dropped numbers are handed out again, the lowest first. No ``strings`` call
        may run beside it. O(numbers + kept bytes).
        """
        n = self.numbers
        if keep.shape != (n,):
            msg = f"retain needs one flag per number (0..{n}), got shape {keep.shape}"
            raise ValueError(msg)
        held = len(self)
        known = self._known.copy()
        kept = self._known[0, :n] != DROPPED
        kept &= keep
        live_bytes = int((known[1, :n] - known[0, :n])[kept].sum())
        arena, taken = pack(self._arena, known, keep, max(MIN_ARENA, 2 * live_bytes))
        top = int(np.flatnonzero(kept)[-1]) + 1 if kept.any() else 0  # numbers still in use
        free = np.flatnonzero(~kept[:top])[::-1].astype(np.int64)  # popped from the end
        spans = max(MIN_SPANS, 1 << max(2 * top - 1, 1).bit_length())
        slots = max(MIN_SLOTS, 1 << (2 * (top + 1) - 1).bit_length())
        self._known = np.empty((3, spans), dtype=np.int64)
        self._known[:, :top] = known[:, :top]
        self._arena = arena
        self._free = free
        self._slots = reindex(self._known, top, slots)
        self._used = np.array([top, taken, len(free)], dtype=np.int64)
        return held - len(self)

    def decoded(self, first: int, stop: int) -> list[str]:
        """Strings ``first..stop`` as Python strings. O(their bytes)."""
        known, arena = self._known, self._arena
        return [bytes(arena[known[0, t] : known[1, t]]).decode("utf-8") for t in range(first, stop)]

    def _grow(self, new_bytes: int) -> None:
        """Room for the next new string: twice the index and spans, bytes for all of a call's.

        ``new_bytes`` (the bytes of every span of the call) bounds what the arena needs.
        """
        n, taken = int(self._used[0]), int(self._used[1])
        if taken + new_bytes > self._arena.shape[0]:
            arena = np.empty(max(2 * self._arena.shape[0], taken + new_bytes), np.uint8)
            arena[:taken] = self._arena[:taken]
            self._arena = arena
        if n == self._known.shape[1]:
            known = np.empty((3, 2 * n), np.int64)
            known[:, :n] = self._known[:, :n]
            self._known = known
        if 2 * (n + 1) > self._slots.shape[0]:
            self._slots = reindex(self._known, n, 2 * self._slots.shape[0])
