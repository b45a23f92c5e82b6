"""A table of distinct byte strings, numbered in order of first appearance.

The strings live in one arena of bytes, indexed by an open-addressing hash table
(``stretch.model._byte_kernels``), so numbering a column of strings runs in a compiled
loop over its Arrow buffers, with no Python string made, and a column of numbers turns
back into an Arrow string array by one copy of its bytes. It costs each distinct string
its bytes plus about 40 bytes (its span and hash, and two index slots at most).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from stretch.model._byte_kernels import FULL, gather, hash_spans, number, reindex

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


class ByteTable:
    """Distinct byte strings and their numbers (0, 1, ... in order of first appearance).

    Not thread-safe for writers: its owner serialises ``number`` calls. ``strings`` may
    run beside a ``number`` call for numbers handed out before it (the arrays only grow
    into copies; a string's bytes never move within one).
    """

    def __init__(self) -> None:
        self._slots = np.full(1024, -1, dtype=np.int64)
        self._known = np.empty((3, 512), dtype=np.int64)
        self._arena = np.empty(1 << 16, dtype=np.uint8)
        self._used = np.zeros(2, dtype=np.int64)

    def __len__(self) -> int:
        return int(self._used[0])

    @property
    def nbytes(self) -> int:
        """Bytes held: the arena, the spans and the index."""
        return int(self._arena.nbytes + self._known.nbytes + self._slots.nbytes)

    def number(self, data: NDArray[np.uint8], found: NDArray[np.int64]) -> NDArray[np.int64]:
        """The numbers of spans ``found`` of ``data`` (start, end, hash), adding new ones.

        Expected O(bytes), amortised over the table's growth.
        """
        while True:
            numbers = number(data, found, self._slots, self._known, self._arena, self._used)
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
